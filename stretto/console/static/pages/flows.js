import { api, ApiError, el, fill, flowHref, fmt, go, localTable, meta, on, page, problem, thead, when } from "../app.js";
import { lifeSection } from "./flowlife.js";

const flowApi = (name) => `/api${flowHref(name)}`;
const thresholdText = (t) => Number(t).toFixed(2);

export async function flowsPage() {
  const data = await api("/api/flows");
  const valid = data.items.filter((f) => f.valid);
  const pick = (id, chosen) => el("select", { id }, valid.map((f) => el("option", { value: f.name, selected: f.name === chosen }, f.role === "staged" ? `${f.name} (staged)` : f.name)));
  const from = pick("diff-from", valid[0]?.name);
  const to = pick("diff-to", valid[valid.length - 1]?.name);
  const threshold = el("input", { type: "number", min: 0, max: 1, step: 0.05, value: 0.3, id: "diff-threshold" });
  const out = el("div", { "data-testid": "diff" });
  const table = flowsTable(data.items);
  const compare = async () => {
    fill(out, el("p", { class: "muted" }, "Comparing…"));
    try {
      const d = await api(`/api/flows/diff?from=${encodeURIComponent(from.value)}&to=${encodeURIComponent(to.value)}&threshold=${threshold.value}`);
      const at = d.at_threshold;
      fill(out, 
        el("h2", {}, `Needs review (${d.needs_review.length})`),
        d.needs_review.length ? el("ul", { class: "review" }, d.needs_review.map((r) => el("li", {}, r))) : el("p", {}, "Nothing: the new flow can do nothing the old one could not."),
        el("h2", {}, `At threshold ${d.threshold}`),
        el("ul", {},
          el("li", {}, `new lookups: ${at.new_lookups.join(", ") || "none"}`),
          el("li", {}, `dropped lookups: ${at.dropped_lookups.join(", ") || "none"}`),
          el("li", {}, `unchanged: ${at.unchanged.join(", ") || "none"}`)),
        el("h2", {}, `Other changes (${d.other.length})`),
        el("ul", {}, d.other.map((r) => el("li", {}, r))));
    } catch (error) {
      fill(out, problem(error));
    }
  };
  fill(page, 
    el("h1", {}, "Flows"),
    table,
    el("h2", {}, "Compare two flows"),
    valid.length < 2 ? el("p", { class: "muted" }, "Two valid flows are needed.") :
      el("div", { class: "row" }, el("label", {}, "from ", from), el("label", {}, "to ", to), el("label", {}, "threshold ", threshold),
        el("button", { onclick: compare, "data-testid": "compare" }, "Compare")),
    out,
  );
  // a live refresh redraws the rows alone: what is typed, picked and focused stays
  on("changed", () => api("/api/flows").then((d) => table.update(d.items)).catch((e) => fill(out, problem(e))));
}

const STATUS = { served: 0, staged: 1 };

function flowsTable(items) {
  const columns = [
    ["flow", (f) => f.name], ["status", (f) => STATUS[f.role] ?? 2], ["domain", (f) => f.domain],
    ["sites", (f) => f.sites], ["learned from", (f) => f.sessions], ["compiled", (f) => f.compiled_unix_ms],
    ["promotion", null], ["problem", (f) => f.error || ""],
  ];
  return localTable({ "data-testid": "flows" }, columns, items, (f) => el("tr", { class: "clickable", onclick: () => go(flowHref(f.name)) },
    el("td", {}, el("a", { href: flowHref(f.name) }, f.name)),
    el("td", { "data-testid": "flow-status" }, roleBadge(f)),
    el("td", {}, f.domain ?? "—"), el("td", {}, fmt(f.sites)),
    el("td", {}, f.valid ? `${fmt(f.sessions)} sessions` : "—"), el("td", {}, when(f.compiled_unix_ms)),
    el("td", {}, f.promoted ? "promoted sites only" : f.valid ? "acts everywhere" : "—"),
    el("td", { class: "problem" }, f.error || "")), { what: "flow" });
}

// served: flows/<domain>.flow.json, what the proxy serves; staged: `stretto stage`'s
// candidate beside a served flow, under review (it acts nowhere until committed)
function roleBadge(f) {
  if (f.role === "served") return el("span", { class: "badge served" }, "served");
  if (f.role === "staged") return el("span", { class: "badge staged", title: `staged beside ${f.staged_beside}: not served` }, "staged");
  return null;
}

function roleNote(f) {
  if (f.role === "staged") return el("div", { class: "box notice", "data-testid": "staged-note" },
    el("span", { class: "badge staged" }, "staged"), " Staged beside ", el("a", { href: flowHref(f.staged_beside) }, f.staged_beside),
    " by `stretto stage`: a candidate under review, not served. Its report is on that flow's page; `stretto flow-commit` serves it.");
  if (f.role === "served") return el("div", { class: "box", "data-testid": "served-note" },
    el("span", { class: "badge served" }, "served"), ` The flow served for ${f.domain} (flows/${f.domain}.flow.json).`);
  return null;
}

let graph = null;

function drawGraph(container, hover, data) {
  if (!window.cytoscape) {
    fill(container, problem(new Error("the graph library is missing: run `make setup` (node/node_modules)")));
    return;
  }
  const elements = [
    ...data.nodes.map((n) => ({ data: { id: n.id, label: n.label, kind: n.kind, binding: n.binding || "", w: 24 + 7.2 * n.label.length }, position: { x: n.kind === "site" ? 120 : 520, y: 50 + n.row * 70 } })),
    ...data.edges.map((e) => ({ data: { ...e, width: 1 + 9 * e.reach } })),
  ];
  if (graph) graph.destroy();
  graph = window.cytoscape({
    container, elements, layout: { name: "preset", fit: true, padding: 30 },
    userZoomingEnabled: false,
    style: [
      { selector: "node", style: { label: "data(label)", "font-size": 12, "text-valign": "center", "text-halign": "center", width: "data(w)", height: 30, shape: "round-rectangle", "background-color": "#e8ebf1", "border-width": 1, "border-color": "#9aa3b5" } },
      { selector: "node[kind = 'lookup']", style: { "background-color": "#e3f3e9", "border-color": "#1f8a4c" } },
      { selector: "edge", style: { width: "data(width)", "curve-style": "bezier", "target-arrow-shape": "triangle", "line-color": "#c3c9d4", "target-arrow-color": "#c3c9d4", "line-style": "dashed" } },
      { selector: "edge[?looks_up]", style: { "line-color": "#1f8a4c", "target-arrow-color": "#1f8a4c", "line-style": "solid" } },
    ],
  });
  const show = (text, e) => {
    hover.textContent = text;
    hover.style.display = "block";
    hover.style.left = `${e.renderedPosition.x + 12}px`;
    hover.style.top = `${e.renderedPosition.y + 12}px`;
  };
  graph.on("mouseover", "node[kind = 'lookup']", (e) => show(`${e.target.data("label")}: ${e.target.data("binding")}`, e));
  graph.on("mouseover", "edge", (e) => show(e.target.data("verdict"), e));
  graph.on("mouseout", () => { hover.style.display = "none"; });
}

function sitesTable(summary) {
  return el("table", { "data-testid": "sites" },
    thead(["after", "threshold", "lookup", "seen", "reach", "binding chance", "score", "at this threshold", "promotion"]),
    summary.sites.flatMap((s) => (s.lookups.length ? s.lookups : [null]).map((lk, i) => el("tr", {},
      el("td", {}, i === 0 ? s.site : ""), el("td", {}, i === 0 ? fmt(s.threshold) : ""),
      el("td", {}, lk ? lk.tool : "—"), el("td", {}, lk ? fmt(lk.seen) : ""), el("td", {}, lk ? fmt(lk.reach) : ""),
      el("td", {}, lk ? fmt(lk.chance) : ""), el("td", {}, lk ? fmt(lk.score) : ""),
      el("td", { class: lk && lk.looks_up ? "looks" : "hands" }, lk ? lk.verdict : "no lookups followed here"),
      el("td", {}, i === 0 && s.promotion ? `${s.promotion.promoted ? "promoted" : "shadow"}: ${s.promotion.text}` : i === 0 ? "acts (no promotion record)" : "")))));
}

function replayBox(r) {
  if (!r.episodes) return el("p", { class: "muted" }, `No recorded sessions of this domain to replay on.`);
  return el("div", { class: "cards", "data-testid": "replay" },
    [["turns saved", `${fmt(r.turns_saved)} of ${fmt(r.turns)}`], ["detours", fmt(r.detours)], ["utility", fmt(r.utility)],
     ["lookups", fmt(r.flow_lookups)], ["used next / later", `${fmt(r.used_next)} / ${fmt(r.used_later)}`],
     ["read-only ceiling", `${fmt(r.ceiling)} turns`], ["sessions", fmt(r.episodes)]]
      .map(([what, n]) => el("div", { class: "card" }, el("div", { class: "n" }, n), el("div", { class: "what" }, what))));
}

function trashButton(name) {
  return meta && !meta.read_only ? el("button", { class: "danger", onclick: async () => {
    if (!confirm(`Move ${name} to the console's trash?`)) return;
    await api(flowApi(name), { method: "DELETE" });
    go("/flows");
  } }, "Move to trash") : null;
}

export async function flowPage(name) {
  let first;
  try {
    first = await api(`${flowApi(name)}`);
  } catch (error) {
    if (!(error instanceof ApiError) || error.status !== 422) throw error;
    // a flow that fails validation: what is wrong with it, the file as it is, and the trash
    fill(page, el("h1", {}, `Flow ${name}`), problem(error),
      el("div", { class: "box row" }, el("span", {}, "This file is not a flow the proxy would load."),
        el("a", { href: `${flowApi(name)}/raw`, target: "_blank" }, "raw"), trashButton(name),
        el("a", { href: "/flows" }, "all flows")));
    return;
  }
  const slider = el("input", { type: "range", min: 0.05, max: 1, step: 0.05, value: first.threshold, id: "threshold", "aria-label": "threshold" });
  const value = el("strong", { "data-testid": "threshold-value" }, thresholdText(first.threshold));
  const lookedUp = el("div", { "data-testid": "looked-up" });
  const replay = el("div", {}, el("p", { class: "muted" }, "Replaying…"));
  const sites = el("div", {});
  const hover = el("div", { id: "hover" });
  const container = el("div", { id: "graph" });
  const wrap = el("div", { style: "position: relative" }, container, hover);
  const remove = trashButton(name);
  fill(page, 
    el("h1", {}, `Flow ${name}`),
    roleNote(first),
    el("div", { class: "box row" },
      el("span", {}, `${first.domain} · learned from ${fmt(first.sessions)} sessions · compiled ${when(first.compiled_unix_ms)}`),
      el("a", { href: `${flowApi(name)}/raw`, target: "_blank" }, "raw"), remove),
    el("div", { class: "box slider" }, "threshold", slider, value,
      el("span", { class: "muted" }, "a site with its own threshold keeps it")),
    el("div", { class: "grid2" },
      el("div", {}, el("h2", {}, "Sites → lookups"), wrap, el("p", { class: "muted" }, "Edge width: reach probability; solid green: looked up at this threshold. Hover a lookup for its bindings.")),
      el("div", {}, el("h2", {}, "Looked up at this threshold"), lookedUp, el("h2", {}, "Replay on the recorded sessions"), replay)),
    el("h2", {}, "Sites"), sites,
    lifeSection(flowApi(name)));
  let asked = 0;
  const show = async (threshold) => {
    const mine = ++asked;
    const [detail, figures] = await Promise.all([
      api(`${flowApi(name)}?threshold=${threshold}`),
      api(`${flowApi(name)}/replay?threshold=${threshold}`).catch((e) => ({ error: e })),
    ]);
    if (mine !== asked) return;  // a later move of the slider won
    value.textContent = thresholdText(detail.threshold);
    fill(lookedUp, detail.looked_up.length ? el("ul", {}, detail.looked_up.map((x) => el("li", { class: "looks" }, x))) : el("p", { class: "hands" }, "nothing: every site hands back"));
    fill(replay, figures.error ? problem(figures.error) : replayBox(figures), figures.sessions ? el("p", { class: "muted" }, `on ${figures.sessions}; utility = ${figures.costs.beta} × saved − ${figures.costs.delta} × detours`) : null);
    fill(sites, sitesTable(detail.summary));
    drawGraph(container, hover, detail.graph);
  };
  let timer = null;
  slider.addEventListener("input", () => {
    value.textContent = thresholdText(slider.value);
    clearTimeout(timer);
    timer = setTimeout(() => show(slider.value).catch((e) => fill(replay, problem(e))), 80);
  });
  await show(first.threshold);
}
