import { api, el, fill, fmt, go, meta, on, page, problem, when } from "../app.js";

const FILTERS = ["domain", "day", "agent_model", "server", "mode"];

export async function sessionsPage() {
  const params = new URLSearchParams(location.search);
  const offset = Number(params.get("offset") || 0);
  const data = await api(`/api/sessions?${params}`);
  const search = el("input", { type: "search", placeholder: "Find a session (id, domain, model, server, path)", value: params.get("q") || "", size: 48, "data-testid": "search" });
  const apply = (changes) => {
    const next = new URLSearchParams(location.search);
    for (const [k, v] of Object.entries(changes)) v ? next.set(k, v) : next.delete(k);
    if (!("offset" in changes)) next.delete("offset");
    go(`/sessions${next.toString() ? "?" + next : ""}`);
  };
  search.addEventListener("change", () => apply({ q: search.value }));
  const selects = FILTERS.map((name) => {
    const select = el("select", { "aria-label": name, onchange: (e) => apply({ [name]: e.target.value }) },
      el("option", { value: "" }, `any ${name.replace("_", " ")}`),
      data.facets[name].map((v) => el("option", { value: v, selected: params.get(name) === v }, v)));
    return select;
  });
  const rows = data.items.map((s) => el("tr", { class: "clickable", "data-calls": s.calls ?? "", onclick: () => go(`/sessions/${encodeURIComponent(s.key)}`) },
    el("td", {}, el("a", { href: `/sessions/${encodeURIComponent(s.key)}` }, s.id || s.path)),
    el("td", {}, when(s.started_unix_ms)), el("td", {}, s.domain || "—"), el("td", {}, s.agent_model || "—"),
    el("td", {}, s.server || "—"), el("td", {}, s.mode ? el("span", { class: `badge ${s.mode}` }, s.mode) : "—"),
    el("td", {}, fmt(s.calls)), el("td", {}, fmt(s.lookups)), el("td", {}, fmt(s.turns)),
    el("td", { class: "problem" }, s.problem || "")));
  fill(page, 
    el("h1", {}, "Sessions"),
    el("div", { class: "row" }, search, selects),
    el("p", { class: "muted" }, `${data.total} session(s)${data.total > data.limit ? `, ${offset + 1}–${Math.min(offset + data.limit, data.total)} shown` : ""}`),
    el("table", { "data-testid": "sessions" },
      el("tr", {}, ["session", "started", "domain", "agent model", "server", "mode", "calls", "lookups", "turns", "problem"].map((h) => el("th", {}, h))),
      rows),
    el("div", { class: "row" },
      offset > 0 ? el("button", { class: "secondary", onclick: () => apply({ offset: String(Math.max(0, offset - data.limit)) }) }, "Previous") : null,
      offset + data.limit < data.total ? el("button", { class: "secondary", onclick: () => apply({ offset: String(offset + data.limit) }) }, "Next") : null),
  );
  on("changed", () => sessionsPage().catch((e) => fill(page, problem(e))));
}

function args(value) {
  const text = JSON.stringify(value ?? {});
  return text.length > 160 ? text.slice(0, 160) + "…" : text;
}

function result(item, key) {
  if (!item.result) return el("span", { class: "muted" }, item.status === "unanswered" ? "no answer" : "");
  const pre = el("pre", {}, item.result.text);
  const more = item.result.cut
    ? el("button", { class: "secondary", onclick: async (e) => {
        e.target.disabled = true;
        const line = await api(`/api/sessions/${encodeURIComponent(key)}/raw?from=${item.result_line}&lines=1`);
        pre.textContent = JSON.stringify(JSON.parse(line), null, 1);
        e.target.remove();
      } }, `show the whole line (${fmt(item.result.chars)} characters)`)
    : null;
  return el("details", {}, el("summary", {}, `result${item.status === "failed" ? " (failed)" : ""}, ${fmt(item.result.chars)} characters`), pre, more);
}

function decisionText(d) {
  const score = d.score === null || d.score === undefined ? "" : ` · p ${fmt(d.prob)} × binding ${fmt(d.binding)} = ${fmt(d.score)}`;
  if (d.action === "lookup") {
    const why = d.withheld ? ` (withheld: ${d.withheld})` : d.shadow ? " (shadow: not looked up)" : "";
    return `would look up ${d.tool} ${args(d.arguments)}${why}${score}`;
  }
  return `hands back: ${d.reason}${d.shadow ? " (shadow)" : ""}`;
}

function item(i, key) {
  const kind = el("span", { class: "kind" }, i.kind);
  if (i.kind === "user" || i.kind === "reply" || i.kind === "context") {
    const who = i.kind === "user" ? "user" : i.kind === "reply" ? `assistant · turn ${i.turn ?? "?"}` : i.role || "context";
    return el("li", { class: i.kind }, el("span", { class: "kind" }, who), i.text, i.cut ? "…" : "");
  }
  if (i.kind === "call") {
    return el("li", { class: "call" }, kind, el("strong", {}, i.tool), " ", el("code", {}, args(i.arguments)), " ",
      el("span", { class: `badge ${i.status}` }, i.status), el("span", { class: "muted" }, ` · turn ${i.turn} · line ${i.line}`),
      i.run ? el("span", { class: "muted" }, ` · the flow ran after it (surprise ${fmt(i.run.surprise)} nats)`) : null,
      result(i, key));
  }
  if (i.kind === "lookup") {
    const d = i.decision;
    const sources = Object.entries(i.sources || {}).map(([arg, s]) => s ? `${arg} from ${s.tool} (call ${s.call})` : `${arg}: no earlier result holds it`).join("; ");
    return el("li", { class: "lookup", "data-testid": "lookup" }, kind, el("strong", {}, i.tool), " ", el("code", {}, args(i.arguments)), " ",
      el("span", { class: `badge ${i.status}` }, i.status),
      d ? el("div", {}, `${d.address} at ${d.site}: p ${fmt(d.prob)} × binding ${fmt(d.binding)} = ${fmt(d.score)} · `,
        el("span", { class: d.used ? "looks" : "hands" }, d.label)) : el("div", { class: "muted" }, "no decision in the flow log"),
      el("div", { class: "muted" }, `binding source: ${sources || "no arguments"}`),
      result(i, key));
  }
  if (i.kind === "decision") {
    return el("li", { class: "decision" }, el("span", { class: "kind" }, `${i.address} at ${i.site ?? "—"}`), decisionText(i),
      i.label ? el("span", { class: i.used ? "looks" : "hands" }, ` · ${i.label}`) : null);
  }
  if (i.kind === "appended") {
    return el("li", { class: "appended", "data-testid": "appended" }, el("span", { class: "kind" }, "appended to the agent's result"),
      el("pre", {}, i.text));
  }
  return el("li", {}, kind, JSON.stringify(i));
}

export async function sessionPage(key) {
  const s = await api(`/api/sessions/${encodeURIComponent(key)}`);
  const list = el("ul", { class: "timeline", "data-testid": "timeline" });
  const more = el("button", { class: "secondary" }, "Load more");
  let next = 0;
  const load = async () => {
    more.disabled = true;
    try {
      const t = await api(`/api/sessions/${encodeURIComponent(key)}/timeline?offset=${next}&limit=100`);
      list.append(...t.items.map((i) => item(i, key)));
      next = t.next;
      more.hidden = next === null;
    } catch (error) {
      list.append(el("li", {}, problem(error)));
      more.hidden = true;
    }
    more.disabled = false;
  };
  more.addEventListener("click", load);
  const remove = meta && !meta.read_only ? el("button", { class: "danger", onclick: async () => {
    if (!confirm(`Move session ${key} (and its copies and side logs) to the console's trash?`)) return;
    await api(`/api/sessions/${encodeURIComponent(key)}`, { method: "DELETE" });
    go("/sessions");
  } }, "Move to trash") : null;
  fill(page, 
    el("h1", {}, `Session ${s.id || key}`),
    s.problem ? problem(new Error(s.problem)) : null,
    el("div", { class: "box row" },
      el("span", {}, `${s.domain ?? "—"} · ${s.agent_model ?? "—"} · ${s.server ?? "—"}`),
      s.mode ? el("span", { class: `badge ${s.mode}` }, s.mode) : null,
      el("span", {}, `${fmt(s.calls)} calls · ${fmt(s.lookups)} lookups · ${fmt(s.turns)} LLM turns · ${fmt(s.size_bytes)} bytes`),
      el("span", { class: "muted" }, when(s.started_unix_ms)),
      el("a", { href: `/api/sessions/${encodeURIComponent(key)}/raw`, target: "_blank" }, "raw log"),
      remove),
    el("p", { class: "muted" }, `${s.path}${s.copies && s.copies.length ? ` (copies: ${s.copies.join(", ")})` : ""}`),
    list, more);
  if (!s.unreadable) await load();
  else more.hidden = true;
}
