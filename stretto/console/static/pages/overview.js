import { api, el, fill, flowHref, fmt, go, meta, on, page, problem, thead } from "../app.js";

let chart = null;

// Why the warehouse and the logs differ, and the ingest that brings it up to date.
function warehouseNotice(w) {
  if (!w || !w.readable || (!w.stale && !w.gone)) return null;
  const where = meta ? w.path.replace(meta.data + "/", "") : w.path;
  const message = el("div");
  const ingest = el("button", { "data-testid": "ingest", disabled: meta && meta.read_only, onclick: async () => {
    try {
      await api("/api/jobs", { method: "POST", body: { kind: "ingest", params: {} } });
      go("/jobs");
    } catch (error) {
      fill(message, problem(error));
    }
  } }, "Ingest");
  return el("div", { class: "box notice", "data-testid": "warehouse-notice" },
    w.stale ? el("p", {}, el("strong", {}, "The warehouse is stale: "),
      `${fmt(w.not_ingested)} session log(s) under logs/ are not in it yet, so \`stretto sql\` and learning from the warehouse do not see them. The figures here are counted from the logs. `, ingest) : null,
    w.gone ? el("p", {}, `The warehouse (${where}) still holds ${fmt(w.gone)} session(s) whose logs are gone (trashed or removed): an ingest never forgets a session. They are not counted here.`) : null,
    message);
}

export async function overviewPage() {
  const data = await api("/api/overview");
  const t = data.totals;
  // each figure with what it counts, so that no card reads alone
  const card = (n, what, why, id) => el("div", { class: "card", "data-testid": id },
    el("div", { class: "n" }, fmt(n)), el("div", { class: "what" }, what), el("div", { class: "why" }, why));
  const canvas = el("canvas", { id: "days" });
  fill(page,
    el("h1", {}, "Overview"),
    el("div", { class: "cards", "data-testid": "totals" },
      card(t.sessions, "sessions", "Session logs under the data directory, each once by its id: the Sessions page's list.", "card-sessions"),
      card(t.calls, "the agents' calls", "Tool calls the agents made themselves.", "card-calls"),
      card(t.lookups, "lookups made", "Calls a served flow made for the agent, their results appended to the agent's.", "card-lookups"),
      card(t.lookups_answered, "lookups answered", "Lookups made whose result the agent did not ask for again: it had it in the appended block (the record cannot tell whether it read it).", "card-answered"),
      card(t.lookups_used, "asked again", "Lookups made that the agent then made itself: the appended result did not spare it the call.", "card-asked-again"),
      card(t.turns_saved, `turns saved (of ${fmt(t.turns)})`, `By replaying each domain's served flow at ${data.threshold} on its recorded sessions (no flow served in them).`, "card-saved"),
      card(t.flows, "valid flows", t.staged_flows ? `Flow files that load; ${fmt(t.staged_flows)} of them staged (under review, not served).` : "Flow files that load.", "card-flows")),
    warehouseNotice(data.warehouse),
    el("p", { class: "muted", "data-testid": "counted" },
      `Counted from the session logs, as the Sessions page lists them (${fmt(t.llm_turns)} LLM turns in them); ` +
      (data.warehouse.readable ? `the warehouse holds ${fmt(data.warehouse.held)} of them (the logs under logs/ it ingested).` : "no warehouse to compare with.")),
    data.problems.length ? el("div", { class: "box problems", "data-testid": "problems" },
      el("strong", {}, `${data.problems.length} problem(s)`),
      // a problem names its file already; else it says what it is about
      el("ul", {}, data.problems.map((p) => el("li", {}, p.problem.startsWith(p.what) ? p.problem : [el("code", {}, p.what), ": ", p.problem])))) : null,
    el("h2", {}, "By day"),
    el("div", { class: "chart" }, canvas),
    el("h2", {}, "By domain"),
    el("table", { "data-testid": "by-domain" },
      thead(["domain", "sessions", "calls", "lookups", "answered", "asked again", "served flow", "turns saved (replay)", "detours"]),
      data.by_domain.map((d) => el("tr", {},
        el("td", {}, d.domain), el("td", {}, fmt(d.sessions)), el("td", {}, fmt(d.calls)), el("td", {}, fmt(d.lookups)),
        el("td", {}, fmt(d.lookups_answered)), el("td", {}, fmt(d.lookups_used)),
        el("td", {}, d.flow ? [el("a", { href: flowHref(d.flow) }, d.flow), d.flow_served ? null : el("span", { class: "muted" }, " (none served: the newest flow)")] : "—"),
        el("td", {}, d.replay && d.replay.episodes ? `${fmt(d.replay.turns_saved)} of ${fmt(d.replay.turns)}` : "—"),
        el("td", {}, d.replay && d.replay.episodes ? fmt(d.replay.detours) : "—")))),
  );
  if (window.Chart) {
    if (chart) chart.destroy();
    chart = new window.Chart(canvas, {
      type: "bar",
      data: {
        labels: data.by_day.map((d) => d.day),
        datasets: [
          { label: "sessions", data: data.by_day.map((d) => d.sessions), backgroundColor: "#2f6fdf" },
          { label: "calls", data: data.by_day.map((d) => d.calls), backgroundColor: "#9aa3b5" },
          { label: "lookups", data: data.by_day.map((d) => d.lookups), backgroundColor: "#1f8a4c" },
        ],
      },
      options: { maintainAspectRatio: false, animation: false },
    });
  } else {
    canvas.replaceWith(problem(new Error("the chart library is missing: run `make setup` (node/node_modules)")));
  }
  on("changed", () => overviewPage().catch((e) => fill(page, problem(e))));
}
