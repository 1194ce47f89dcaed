import { api, el, fill, flowHref, fmt, meta, on, page, problem } from "../app.js";

let chart = null;

export async function overviewPage() {
  const data = await api("/api/overview");
  const t = data.totals;
  const card = (n, what) => el("div", { class: "card" }, el("div", { class: "n" }, fmt(n)), el("div", { class: "what" }, what));
  const canvas = el("canvas", { id: "days" });
  fill(page, 
    el("h1", {}, "Overview"),
    el("div", { class: "cards", "data-testid": "totals" },
      card(t.sessions, "sessions"), card(t.calls, "the agents' calls"), card(t.lookups, "lookups made"),
      card(t.lookups_used, "lookups used later"), card(t.turns_saved, `turns saved (of ${fmt(t.turns)}, by replay)`),
      card(t.flows, "valid flows")),
    el("p", { class: "muted", "data-testid": "counted" }, data.source === "warehouse"
      ? `Each session counted once, by its id: from the warehouse (${meta ? data.warehouse.replace(meta.data + "/", "") : data.warehouse}) when it holds it, else from its log (${fmt(data.from_logs)} sessions); lookups used from the logs; turns saved by replaying each domain's newest flow at ${data.threshold} on its recorded sessions.`
      : `Counts from the logs (no warehouse to read); turns saved by replaying each domain's newest flow at ${data.threshold} on its recorded sessions.`),
    data.problems.length ? el("div", { class: "box problems", "data-testid": "problems" },
      el("strong", {}, `${data.problems.length} problem(s)`),
      // a problem names its file already; else it says what it is about
      el("ul", {}, data.problems.map((p) => el("li", {}, p.problem.startsWith(p.what) ? p.problem : [el("code", {}, p.what), ": ", p.problem])))) : null,
    el("h2", {}, "By day"),
    el("div", { class: "chart" }, canvas),
    el("h2", {}, "By domain"),
    el("table", {},
      el("tr", {}, ["domain", "sessions", "calls", "lookups", "used later", "newest flow", "turns saved (replay)", "detours"].map((h) => el("th", {}, h))),
      data.by_domain.map((d) => el("tr", {},
        el("td", {}, d.domain), el("td", {}, fmt(d.sessions)), el("td", {}, fmt(d.calls)), el("td", {}, fmt(d.lookups)),
        el("td", {}, fmt(d.lookups_used)),
        el("td", {}, d.flow ? el("a", { href: flowHref(d.flow) }, d.flow) : "—"),
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
