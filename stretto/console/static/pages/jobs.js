import { api, el, fill, fmt, localTable, meta, on, page, problem, when } from "../app.js";

// What each job asks for: [field, label, kind]; kinds: flow, folder, text, number, check.
const FORMS = {
  audit: [["flow", "flow", "flow"], ["sessions", "sessions it never saw", "folder"]],
  replay: [["flow", "flow", "flow"], ["sessions", "sessions", "folder"], ["threshold", "threshold", "number"]],
  search: [["flow", "flow", "flow"], ["sessions", "training sessions", "folder"], ["out", "write the flow to", "text"], ["replace", "replace it if it exists", "check"]],
  promote: [["flow", "flow", "flow"], ["shadow", "shadow sessions", "folder"], ["out", "write the flow to", "text"], ["replace", "replace it if it exists", "check"]],
  learn: [["sessions", "sessions", "folder"], ["domain", "domain", "text"], ["out", "write the flow to", "text"], ["replace", "replace it if it exists", "check"]],
  ingest: [],
  doctor: [],
};

function artifactView(job, a) {
  const href = `/api/jobs/${encodeURIComponent(job.id)}/artifacts/${a.path.split("/").map(encodeURIComponent).join("/")}`;
  const link = el("a", { href, target: "_blank" }, `${a.path} (${fmt(a.size)} bytes)`);
  return el("li", {}, link, a.path.endsWith(".png") ? el("div", {}, el("img", { src: href, alt: a.path })) : null);
}

// The command as run, its paths relative to the data directory (the job's STRETTO_HOME).
const shownArg = (a) => (!meta ? a : a === meta.data ? "$STRETTO_HOME" : a.replace(meta.data + "/", ""));

async function showJob(box, id) {
  const job = await api(`/api/jobs/${encodeURIComponent(id)}`);
  const output = await api(`/api/jobs/${encodeURIComponent(id)}/output`);
  const cancel = job.state === "running" && meta && !meta.read_only
    ? el("button", { class: "danger", onclick: () => api(`/api/jobs/${encodeURIComponent(id)}/cancel`, { method: "POST" }).catch((e) => box.append(problem(e))) }, "Cancel") : null;
  fill(box, 
    el("h2", {}, `Job ${job.id}`),
    el("div", { class: "row" }, el("span", { class: `badge ${job.state === "succeeded" ? "ok" : job.state}`, "data-testid": "job-state" }, job.state),
      el("code", { title: job.argv.join(" ") }, job.argv.map(shownArg).join(" ")), job.exit_code !== null ? el("span", { class: "muted" }, `exit ${job.exit_code}`) : null, cancel),
    job.writes.length ? el("p", {}, `writes: ${job.writes.join(", ")}`) : null,
    job.dagster_links.length ? el("p", {}, "Dagster UI: ", job.dagster_links.map((u) => el("a", { href: u, target: "_blank" }, u.split("/").pop() + " "))) : null,
    el("pre", { "data-testid": "job-output" }, output || "(no output yet)"),
    job.artifacts.length ? el("div", { class: "artifacts" }, el("h2", {}, "Artifacts"), el("ul", {}, job.artifacts.map((a) => artifactView(job, a)))) : null,
  );
}

export async function jobsPage() {
  const [list, flows, sessions] = await Promise.all([api("/api/jobs"), api("/api/flows"), api("/api/sessions?limit=200")]);
  const folders = [...new Set(sessions.items.flatMap((s) => [s.path, ...s.copies]).map((p) => p.split("/").slice(0, -1).join("/")))].sort();
  const kind = el("select", { id: "job-kind", "aria-label": "job" }, Object.keys(FORMS).map((k) => el("option", { value: k }, k)));
  const fields = el("div", { class: "row" });
  const inputs = {};
  const build = () => {
    fill(fields, );
    for (const [name, label, type] of FORMS[kind.value]) {
      let input;
      if (type === "flow") input = el("select", {}, flows.items.filter((f) => f.valid).map((f) => el("option", { value: f.name }, f.role === "staged" ? `${f.name} (staged)` : f.name)));
      else if (type === "folder") input = el("select", {}, folders.map((f) => el("option", { value: f }, f)));
      else if (type === "check") input = el("input", { type: "checkbox" });
      else if (type === "number") input = el("input", { type: "number", step: 0.05, min: 0, max: 1, value: 0.3 });
      else input = el("input", { type: "text", size: 34, placeholder: name === "out" ? "flows/NAME.flow.json" : "" });
      input.name = name;
      inputs[name] = input;
      fields.append(el("label", {}, `${label} `, input));
    }
  };
  kind.addEventListener("change", build);
  build();
  const detail = el("div", { class: "box" }, el("p", { class: "muted" }, "Start a job, or pick one below."));
  const message = el("div");
  const start = el("button", { "data-testid": "start-job", disabled: meta && meta.read_only, onclick: async () => {
    const params = {};
    for (const [name, , type] of FORMS[kind.value]) {
      const input = inputs[name];
      if (type === "check") params[name] = input.checked;
      else if (type === "number") params[name] = Number(input.value);
      else if (input.value) params[name] = input.value;
    }
    fill(message, );
    try {
      const job = await api("/api/jobs", { method: "POST", body: { kind: kind.value, params } });
      current = job.id;
      await refresh();
    } catch (error) {
      fill(message, problem(error));
    }
  } }, "Start");
  const columns = [["job", (j) => j.id], ["state", (j) => j.state], ["started", (j) => j.started_unix_ms], ["finished", (j) => j.finished_unix_ms]];
  const jobRow = (j) => el("tr", { class: "clickable", onclick: () => { current = j.id; showJob(detail, j.id); } },
    el("td", {}, j.id), el("td", {}, el("span", { class: `badge ${j.state === "succeeded" ? "ok" : j.state}` }, j.state)),
    el("td", {}, when(j.started_unix_ms)), el("td", {}, when(j.finished_unix_ms)));
  const table = localTable({ "data-testid": "jobs" }, columns, list.items, jobRow, { what: "job" });
  let current = list.running ? list.running.id : list.items[0]?.id;
  const refresh = async () => {
    const now = await api("/api/jobs");
    table.update(now.items);
    if (current) await showJob(detail, current);
  };
  fill(page, el("h1", {}, "Jobs"),
    el("div", { class: "box" }, el("div", { class: "row" }, "job", kind, fields, start), message,
      el("p", { class: "muted" }, "One job at a time; each runs the stretto command in a process of its own. Output and artifacts stay under console/jobs/ in the data directory.")),
    detail, el("h2", {}, "All jobs"), table);
  await refresh();
  let pending = null;
  on("job", (event) => {
    if (event.id === current) {
      const pre = detail.querySelector("[data-testid=job-output]");
      if (pre && event.output_tail) pre.textContent = event.output_tail;
      const state = detail.querySelector("[data-testid=job-state]");
      if (state) state.textContent = event.state;
    }
    if (event.state !== "running" && event.state !== "cancelling") {
      clearTimeout(pending);
      pending = setTimeout(() => refresh().catch((e) => fill(message, problem(e))), 100);
    }
  });
}
