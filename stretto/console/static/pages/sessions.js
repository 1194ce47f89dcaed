import { api, columnHead, el, fill, fmt, go, meta, on, page, problem, when } from "../app.js";

const FILTERS = ["domain", "day", "agent_model", "server", "mode"];

const COLUMNS = [["session", "session"], ["started", "started"], ["domain", "domain"], ["agent model", "agent_model"],
  ["server", "server"], ["mode", "mode"], ["calls", "calls"], ["lookups", "lookups"], ["turns", "turns"], ["problem", "problem"]];

export async function sessionsPage() {
  const params = new URLSearchParams(location.search);
  const offset = Number(params.get("offset") || 0);
  const data = await api(`/api/sessions?${params}`);
  const apply = (changes) => {
    const next = new URLSearchParams(location.search);
    for (const [k, v] of Object.entries(changes)) v ? next.set(k, v) : next.delete(k);
    if (!("offset" in changes)) next.delete("offset");
    go(`/sessions${next.toString() ? "?" + next : ""}`);
  };
  // the search is sent with Enter or the button only: a half-typed one never is
  const search = el("input", { type: "search", id: "session-search", placeholder: "id, domain, model, server, path", value: params.get("q") || "", size: 40, "data-testid": "search" });
  const form = el("form", { role: "search", class: "row", onsubmit: (e) => { e.preventDefault(); apply({ q: search.value.trim() }); } },
    el("label", { for: "session-search" }, "Find a session"), search, el("button", { type: "submit", class: "secondary" }, "Search"));
  const selects = FILTERS.map((name) => el("label", {}, `${name.replace("_", " ")} `,
    el("select", { name, onchange: (e) => apply({ [name]: e.target.value }) },
      el("option", { value: "" }, "any"),
      data.facets[name].map((v) => el("option", { value: v, selected: params.get(name) === v }, v)))));
  const results = el("div", { "data-testid": "session-results" });
  const filtered = [...params.keys()].some((k) => k === "q" || FILTERS.includes(k));
  const draw = (d) => fill(results, sessionsTable(d, params, offset, apply, filtered));
  draw(data);
  fill(page,
    el("h1", {}, "Sessions"),
    el("div", { class: "row filters" }, form, selects),
    results);
  // a live refresh redraws the results alone, for the search in the address (never the one
  // being typed): the box, what is typed in it and the focus stay
  on("changed", () => api(`/api/sessions?${params}`).then(draw).catch((e) => fill(results, problem(e))));
}

function sessionsTable(data, params, offset, apply, filtered) {
  if (!data.items.length) {
    return el("div", { class: "box empty", "data-testid": "empty" },
      filtered ? el("p", {}, "No session matches these filters.") : el("p", {}, "No session logs in the data directory yet: the proxy writes them under logs/<domain>/."),
      filtered ? el("button", { type: "button", "data-testid": "clear-filters", onclick: () => go("/sessions") }, "Clear filters") : null);
  }
  const sort = params.get("sort");
  const order = params.get("order") || "asc";
  const head = COLUMNS.map(([label, key]) => columnHead(label, sort === key ? (order === "desc" ? "descending" : "ascending") : "none",
    () => apply({ sort: key, order: sort === key && order === "asc" ? "desc" : "asc" })));
  const rows = data.items.map((s) => el("tr", { class: "clickable", "data-calls": s.calls ?? "", onclick: () => go(`/sessions/${encodeURIComponent(s.key)}`) },
    el("td", {}, el("a", { href: `/sessions/${encodeURIComponent(s.key)}` }, s.id || s.path)),
    el("td", {}, when(s.started_unix_ms)), el("td", {}, s.domain || "—"), el("td", {}, s.agent_model || "—"),
    el("td", {}, s.server || "—"), el("td", {}, s.mode ? el("span", { class: `badge ${s.mode}` }, s.mode) : "—"),
    el("td", {}, fmt(s.calls)), el("td", {}, fmt(s.lookups)), el("td", {}, fmt(s.turns)),
    el("td", { class: "problem" }, s.problem || "")));
  return el("div", {},
    el("p", { class: "muted", "data-testid": "count" }, `${data.total} session(s)${data.total > data.limit ? `, ${offset + 1}–${Math.min(offset + data.limit, data.total)} shown` : ""}`,
      filtered ? " " : null, filtered ? el("button", { type: "button", class: "secondary", "data-testid": "clear-filters", onclick: () => go("/sessions") }, "Clear filters") : null),
    el("table", { "data-testid": "sessions" }, el("thead", {}, el("tr", {}, head)), el("tbody", {}, rows)),
    el("div", { class: "row" },
      offset > 0 ? el("button", { class: "secondary", onclick: () => apply({ offset: String(Math.max(0, offset - data.limit)) }) }, "Previous") : null,
      offset + data.limit < data.total ? el("button", { class: "secondary", onclick: () => apply({ offset: String(offset + data.limit) }) }, "Next") : null));
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

// When an item happened: seconds since the session began, the clock time on hover.
function at(i, started) {
  if (i.t_ms === undefined || i.t_ms === null) return null;
  const clock = started ? when(started + i.t_ms) : "";
  return el("time", { class: "at muted", title: clock, datetime: started ? new Date(started + i.t_ms).toISOString() : null, "data-testid": "at" }, `+${(i.t_ms / 1000).toFixed(3)} s`);
}

function latency(i) {
  if (i.latency_ms === undefined || i.latency_ms === null) return null;
  return el("span", { class: "latency", "data-testid": "latency" }, ` · ${fmt(i.latency_ms)} ms`);
}

function toolKind(i) {
  return i.tool_kind ? el("span", { class: `badge tool-${i.tool_kind}`, title: "the server's readOnlyHint", "data-testid": "tool-kind" }, i.tool_kind) : null;
}

function item(i, key, started) {
  const kind = el("span", { class: "kind" }, i.kind);
  if (i.kind === "user" || i.kind === "reply" || i.kind === "context") {
    const who = i.kind === "user" ? "user" : i.kind === "reply" ? `assistant · turn ${i.turn ?? "?"}` : i.role || "context";
    return el("li", { class: i.kind }, at(i, started), el("span", { class: "kind" }, who), i.text, i.cut ? "…" : "");
  }
  if (i.kind === "call") {
    return el("li", { class: "call", id: `line-${i.line}`, tabindex: -1 }, at(i, started), kind, el("strong", {}, i.tool), " ", toolKind(i), " ", el("code", {}, args(i.arguments)), " ",
      el("span", { class: `badge ${i.status}` }, i.status), latency(i), el("span", { class: "muted" }, ` · turn ${i.turn} · line ${i.line}`),
      i.run ? el("span", { class: "muted" }, ` · the flow ran after it (surprise ${fmt(i.run.surprise)} nats)`) : null,
      result(i, key));
  }
  if (i.kind === "lookup") {
    const d = i.decision;
    const sources = Object.entries(i.sources || {}).map(([arg, s]) => s ? `${arg} from ${s.tool} (call ${s.call})` : `${arg}: no earlier result holds it`).join("; ");
    return el("li", { class: "lookup", "data-testid": "lookup" }, at(i, started), kind, el("strong", {}, i.tool), " ", toolKind(i), " ", el("code", {}, args(i.arguments)), " ",
      el("span", { class: `badge ${i.status}` }, i.status), latency(i),
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
    // collapsed to its first line (a long session holds many): a click shows it whole
    const first = (i.text || "").split("\n", 1)[0];
    const lines = (i.text || "").split("\n").length;
    return el("li", { class: "appended", "data-testid": "appended" },
      el("details", {}, el("summary", {}, el("span", { class: "kind" }, "appended to the agent's result"), first,
        lines > 1 ? el("span", { class: "muted" }, ` (${lines} lines)`) : null),
        el("pre", {}, i.text)));
  }
  return el("li", {}, kind, JSON.stringify(i));
}

// The turns as bars on one time axis (ms since the session began): where the time went.
function waterfallBox(w) {
  if (!w.turns.length) return el("p", { class: "muted" }, "No turns of the agent's in this session.");
  // the axis runs from the first turn's start to the last one's end (the time before, waiting
  // for the user's first message, is no turn's)
  const begin = Math.min(...w.turns.map((t) => t.start_ms));
  const end = Math.max(begin + 1, ...w.turns.map((t) => t.end_ms));
  const span = end - begin;
  const rowH = 16, width = 100;
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${w.turns.length * rowH}`);
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("height", String(w.turns.length * rowH));  // the box scrolls
  svg.setAttribute("width", "100%");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `waterfall of ${w.turns.length} turns over ${fmt(span)} ms`);
  w.turns.forEach((t, n) => {
    const bar = document.createElementNS("http://www.w3.org/2000/svg", "rect");
    bar.setAttribute("x", String(((t.start_ms - begin) / span) * width));
    bar.setAttribute("y", String(n * rowH + 3));
    bar.setAttribute("width", String(Math.max(0.4, ((t.end_ms - t.start_ms) / span) * width)));
    bar.setAttribute("height", String(rowH - 6));
    bar.setAttribute("class", "turn-bar");
    const title = document.createElementNS("http://www.w3.org/2000/svg", "title");
    title.textContent = `turn ${t.turn}: +${fmt(t.start_ms)}–${fmt(t.end_ms)} ms, ${t.calls} call(s), ${t.lookups} lookup(s), ${fmt(t.latency_ms)} ms waiting for answers`;
    bar.append(title);
    svg.append(bar);
  });
  const l = w.latency_ms;  // the agent's calls only
  const k = w.lookup_latency_ms;  // the flow's lookups, apart
  return el("div", { "data-testid": "waterfall" },
    el("p", { class: "muted" }, `${w.turns.length} turn(s) over ${(span / 1000).toFixed(2)} s, from +${(begin / 1000).toFixed(2)} s`,
      l.calls ? ` · latency of ${fmt(l.calls)} answered call(s): median ${fmt(l.median)} ms, longest ${fmt(l.max)} ms` : "",
      k && k.lookups ? ` · of ${fmt(k.lookups)} answered lookup(s): median ${fmt(k.median)} ms, longest ${fmt(k.max)} ms` : ""),
    el("div", { class: "waterfall" }, svg));
}

function toolsBox(t) {
  if (!t.items.length) return el("p", { class: "muted" }, "The log holds no tools/list answer.");
  return el("table", { "data-testid": "tools" },
    el("thead", {}, el("tr", {}, ["tool", "kind", "description", "input"].map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, t.items.map((x) => el("tr", {},
      el("td", {}, el("code", {}, x.name)),
      el("td", {}, el("span", { class: `badge tool-${x.kind}` }, x.kind)),
      el("td", {}, x.description || "—"),
      el("td", {}, x.input_schema
        ? el("details", {}, el("summary", {}, x.contract || "schema"), el("pre", {}, JSON.stringify(x.input_schema, null, 1)))
        : "—")))));
}

export async function sessionPage(key) {
  const s = await api(`/api/sessions/${encodeURIComponent(key)}`);
  const list = el("ul", { class: "timeline", "data-testid": "timeline" });
  const more = el("button", { class: "secondary" }, "Load more");
  let next = 0;
  let callsShown = 0;
  const load = async (limit = 100) => {
    more.disabled = true;
    try {
      const t = await api(`/api/sessions/${encodeURIComponent(key)}/timeline?offset=${next}&limit=${limit}`);
      list.append(...t.items.map((i) => {
        const node = item(i, key, s.started_unix_ms);
        if (i.kind === "call") node.dataset.call = String(++callsShown);  // the agent's N-th call
        return node;
      }));
      if (expanded) for (const d of list.querySelectorAll("li.appended details")) d.open = true;
      next = t.next;
      more.hidden = next === null;
    } catch (error) {
      list.append(el("li", {}, problem(error)));
      more.hidden = true;
    }
    more.disabled = false;
  };
  more.addEventListener("click", () => load());
  // jump to the agent's N-th call: the pages up to it are loaded, then it is shown and focused
  const callNumber = el("input", { type: "number", min: 1, max: s.calls || 1, id: "jump-call", size: 6, "data-testid": "jump-call" });
  const jumpSaid = el("span", { class: "muted", role: "status" });
  const jump = el("form", { class: "row", onsubmit: async (e) => {
    e.preventDefault();
    const n = Number(callNumber.value);
    if (!Number.isInteger(n) || n < 1 || n > (s.calls || 0)) { jumpSaid.textContent = `a call from 1 to ${fmt(s.calls || 0)}`; return; }
    jumpSaid.textContent = "Loading…";
    while (callsShown < n && next !== null) await load(200);
    const target = list.querySelector(`li.call[data-call="${n}"]`);
    if (!target) { jumpSaid.textContent = `no call ${n} in the timeline`; return; }
    for (const old of list.querySelectorAll("li.target")) old.classList.remove("target");
    target.classList.add("target");
    target.scrollIntoView({ block: "center" });
    target.focus({ preventScroll: true });
    jumpSaid.textContent = `call ${n}, line ${target.id.replace("line-", "")}`;
  } }, el("label", { for: "jump-call" }, "Jump to call"), callNumber, el("button", { type: "submit", class: "secondary" }, "Go"), jumpSaid);
  let expanded = false;
  const expand = el("button", { type: "button", class: "secondary", "aria-pressed": "false", "data-testid": "expand-appended", onclick: () => {
    expanded = !expanded;
    expand.setAttribute("aria-pressed", String(expanded));
    expand.textContent = expanded ? "Collapse the appended blocks" : "Expand the appended blocks";
    for (const d of list.querySelectorAll("li.appended details")) d.open = expanded;
  } }, "Expand the appended blocks");
  const waterfall = el("div", {}, el("p", { class: "muted" }, "Reading the turns…"));
  const tools = el("div", {}, el("p", { class: "muted" }, "Reading the tools…"));
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
    s.unreadable ? null : el("details", { class: "box", open: true, "data-testid": "time" }, el("summary", {}, el("strong", {}, "Turns in time")), waterfall),
    s.unreadable ? null : el("details", { class: "box" }, el("summary", {}, el("strong", {}, "The server's tools")), tools),
    el("h2", {}, "Timeline"),
    s.unreadable ? null : el("div", { class: "row" }, jump, s.lookups ? expand : null),
    list, more);
  if (!s.unreadable) {
    const base = `/api/sessions/${encodeURIComponent(key)}`;
    api(`${base}/waterfall`).then((w) => fill(waterfall, waterfallBox(w))).catch((e) => fill(waterfall, problem(e)));
    api(`${base}/tools`).then((t) => fill(tools, toolsBox(t))).catch((e) => fill(tools, problem(e)));
  }
  if (!s.unreadable) await load();
  else more.hidden = true;
}
