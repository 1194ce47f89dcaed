// A flow's life on its page: the committed versions (flow-log), the report of the flow staged
// beside it (stage), and the drift series of its domain's sessions (drift).
import { api, el, fill, fmt, problem, thead, when } from "../app.js";

let chart = null;

function versionsBox(data) {
  if (!data.versions.length) return el("p", { class: "muted" }, "No committed versions: `stretto flow-commit` keeps each version it serves.");
  return el("table", { "data-testid": "versions" },
    thead(["version", "when", "action", "note", "needs review", "content"]),
    data.versions.map((v) => el("tr", {},
      el("td", {}, v.version === data.served ? `${v.version} (served)` : String(v.version)), el("td", {}, when(v.unix_ms)),
      el("td", {}, v.action === "rollback" ? `rollback to ${v.to}` : "commit"), el("td", {}, v.note),
      el("td", { class: v.review.length ? "problem" : "" }, v.review.length ? v.review.join("; ") : "nothing"),
      el("td", {}, el("code", {}, v.sha256.slice(0, 12))))));
}

function share(t) {
  if (!t.lookups) return "—";
  const [low, high] = t.interval;
  return `${fmt(t.used)} (${Math.round(100 * t.used / t.lookups)}%, 90%: ${Math.round(100 * low)}–${Math.round(100 * high)}%)`;
}

function stagedBox(data) {
  const r = data.report;
  if (!r) return el("p", { class: "muted" }, "Nothing staged: `stretto stage` relearns the flow beside it and scores both.");
  const t = r.totals;
  const d = t.difference;
  const verdict = d.interval
    ? `${d.mean >= 0 ? "+" : ""}${d.mean.toFixed(2)} used − detours per session (90% interval ${d.interval[0].toFixed(2)} to ${d.interval[1].toFixed(2)})`
    : "too few sessions for an interval";
  return el("div", { "data-testid": "staged" },
    el("p", {}, `${r.staged}, scored on the last ${t.sessions} sessions: ${verdict}; `,
      el("strong", {}, t.better ? "the staged flow is better." : "not shown better.")),
    el("table", {},
      thead(["flow", "lookups", "used", "detours", "served"]),
      ["committed", "staged"].map((part) => el("tr", {},
        el("td", {}, part), el("td", {}, fmt(t[part].lookups)), el("td", {}, share(t[part])),
        el("td", {}, fmt(t[part].detours)), el("td", {}, fmt(t[part].served))))),
    el("h3", {}, `Committing would need review (${r.review.length})`),
    r.review.length ? el("ul", { class: "review" }, r.review.map((x) => el("li", {}, x))) : el("p", {}, "Nothing."));
}

function driftBox(data, canvas) {
  const last = data.sessions[data.sessions.length - 1];
  const said = data.sounding
    ? `The alarm is sounding: the agent's habits changed around ${data.alarms[data.alarms.length - 1].change_session}.`
    : data.sessions.length ? "The alarm is not sounding after the last session." : "No sessions of this domain yet.";
  const box = el("div", { "data-testid": "drift" },
    el("p", { class: data.sounding ? "problem" : "" }, said, " ", el("span", { class: "muted" },
      `${data.sessions_read}, in start order; last change probability ${last ? fmt(last.change) : "—"}.`)),
    el("div", { class: "chart" }, canvas));
  const unknown = Object.keys(data.unknown_tools);
  if (unknown.length) box.append(el("p", {}, `Tools the flow never learned: ${unknown.join(", ")}`));
  return box;
}

// Drawn once the canvas is on the page (a detached canvas has no size).
function drawDrift(data, canvas) {
  if (!window.Chart) {
    canvas.replaceWith(problem(new Error("the chart library is missing: run `make setup` (node/node_modules)")));
    return;
  }
  const series = (key) => data.sessions.map((s) => s[key]);
  if (chart) chart.destroy();
  chart = new window.Chart(canvas, {
    type: "line",
    data: {
      labels: data.sessions.map((s, i) => i),
      datasets: [
        { label: "surprise (nats)", data: series("surprise"), borderColor: "#2f6fdf", yAxisID: "y" },
        { label: "disagreement", data: series("disagreement"), borderColor: "#b7791f", yAxisID: "p" },
        { label: "unknown", data: series("unknown"), borderColor: "#6b7385", yAxisID: "p" },
        { label: "change probability", data: series("change"), borderColor: "#c0392b", yAxisID: "p" },
      ],
    },
    options: {
      maintainAspectRatio: false, animation: false, spanGaps: true,
      scales: { y: { position: "left", beginAtZero: true }, p: { position: "right", min: 0, max: 1 } },
    },
  });
}

// The drift series is computed in the background: its progress is asked for until it is done
// (or too large, or failed), and no longer once the page shows something else.
const DRIFT_POLL_MS = 700;

function driftProgress(d) {
  const share = d.total ? ` (${d.done} of ${d.total})` : "";
  return el("div", { "data-testid": "drift-progress", role: "status" },
    el("p", { class: "muted" }, `Computing the drift series in the background: ${d.step}${share}…`),
    el("progress", { max: d.total || 1, value: d.done, "aria-label": "drift computed" }));
}

async function followDrift(path, box, canvas) {
  for (;;) {
    let d;
    try {
      d = await api(path);
    } catch (e) {
      fill(box, problem(e));
      return;
    }
    if (d.state === "done") {
      fill(box, driftBox(d, canvas));
      drawDrift(d, canvas);
      return;
    }
    if (d.state === "too_large" || d.state === "failed") {
      const large = d.state === "too_large";
      fill(box, el("div", { class: large ? "box notice" : "box problems", "data-testid": large ? "drift-too-large" : "drift-failed" },
        el("strong", {}, large ? "Too large to compute here: " : "Problem: "), d.error));
      return;
    }
    fill(box, driftProgress(d));
    await new Promise((done) => setTimeout(done, DRIFT_POLL_MS));
    if (!box.isConnected) return;  // the page changed: stop asking
  }
}

// The three parts, each filled when its answer comes (one failing leaves the others).
export function lifeSection(flowApi) {
  const versions = el("div", {}, el("p", { class: "muted" }, "Reading the versions…"));
  const staged = el("div", {}, el("p", { class: "muted" }, "Reading the staged flow…"));
  const drift = el("div", {}, el("p", { class: "muted" }, "Computing the drift series…"));
  const canvas = el("canvas", { id: "drift-chart" });
  api(`${flowApi}/versions`).then((d) => fill(versions, versionsBox(d))).catch((e) => fill(versions, problem(e)));
  api(`${flowApi}/staged`).then((d) => fill(staged, stagedBox(d))).catch((e) => fill(staged, problem(e)));
  followDrift(`${flowApi}/drift`, drift, canvas);
  return el("div", {},
    el("h2", {}, "Versions"), versions,
    el("h2", {}, "Staged"), staged,
    el("h2", {}, "Drift"), drift);
}
