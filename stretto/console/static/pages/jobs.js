import { api, el, fill, flowHref, fmt, localTable, meta, on, page, problem, when } from "../app.js";

// What each job asks for: [field, label, kind]; kinds: flow, served (a flow that is not
// staged), folder, domain, text, number (a threshold, 0 to 1), check.
const FORMS = {
  audit: [["flow", "flow", "flow"], ["sessions", "sessions it never saw", "folder"]],
  replay: [["flow", "flow", "flow"], ["sessions", "sessions", "folder"], ["threshold", "threshold", "number"]],
  evaluate: [["flow", "flow served", "flow"], ["sessions", "explored sessions (with flow logs)", "folder"], ["threshold", "threshold", "number"]],
  search: [["flow", "flow", "flow"], ["sessions", "training sessions", "folder"], ["out", "write the flow to", "text"], ["replace", "replace it if it exists", "check"]],
  promote: [["flow", "flow", "flow"], ["shadow", "shadow sessions", "folder"], ["out", "write the flow to", "text"], ["replace", "replace it if it exists", "check"]],
  learn: [["sessions", "sessions", "folder"], ["domain", "domain", "domain"], ["out", "write the flow to", "text"], ["replace", "replace it if it exists", "check"]],
  stage: [["flow", "flow served", "served"], ["sessions", "sessions", "folder"]],
  "flow-commit": [["flow", "flow served", "served"], ["note", "why this version", "text"]],
  ingest: [],
  doctor: [],
};

const jobPath = (id) => `/jobs/${encodeURIComponent(id)}`;
const artifactHref = (job, path, what = "artifacts") =>
  `/api/jobs/${encodeURIComponent(job.id)}/${what}/${path.split("/").map(encodeURIComponent).join("/")}`;

// A report rendered (the server escapes every character of the file, then adds the few tags
// of its Markdown), or a table's first rows.
async function preview(job, a, box) {
  try {
    const shown = await api(artifactHref(job, a.path, "preview"));
    if (shown.kind === "markdown") {
      const report = el("div", { class: "report", "data-testid": "report" });
      report.innerHTML = shown.html;
      fill(box, report);
    } else {
      const more = shown.rows_total > shown.rows.length ? `first ${fmt(shown.rows.length)} of ${fmt(shown.rows_total)} rows` : `${fmt(shown.rows_total)} rows`;
      fill(box, el("p", { class: "muted" }, more),
        el("div", { class: "scroll" }, el("table", { "data-testid": "parquet-preview" },
          el("thead", {}, el("tr", {}, shown.columns.map((c) => el("th", { scope: "col" }, c)))),
          el("tbody", {}, shown.rows.map((r) => el("tr", {}, r.map((v) => el("td", {}, typeof v === "number" ? fmt(v, 4) : v === null ? "—" : String(v)))))))));
    }
  } catch (error) {
    fill(box, problem(error));
  }
}

function artifactView(job, a) {
  const href = artifactHref(job, a.path);
  const link = el("a", { href, target: "_blank" }, `${a.path} (${fmt(a.size)} bytes)`);
  let shown = null;
  if (a.path.endsWith(".md")) {  // a report: shown at once
    shown = el("div", {});
    preview(job, a, shown);
  } else if (a.path.endsWith(".parquet")) {  // a table: its first rows on demand
    shown = el("div", {});
    const open = el("button", { class: "secondary", type: "button", "aria-expanded": "false", onclick: () => {
      if (open.getAttribute("aria-expanded") === "true") { fill(shown, ); open.setAttribute("aria-expanded", "false"); return; }
      open.setAttribute("aria-expanded", "true");
      fill(shown, el("p", { class: "muted" }, "Reading…"));
      preview(job, a, shown);
    } }, "Preview");
    return el("li", {}, link, " ", open, shown);
  }
  return el("li", {}, link, a.path.endsWith(".png") ? el("div", {}, el("img", { src: href, alt: a.path })) : shown);
}

// The command as run, its paths relative to the data directory (the job's STRETTO_HOME).
const shownArg = (a) => (!meta ? a : a === meta.data ? "$STRETTO_HOME" : a.replace(meta.data + "/", ""));

// Draw a job in `box`; `latest()` says whether this is still the newest draw asked for: an
// older one answered late (the job running, with its Cancel) never covers a newer one.
async function showJob(box, id, latest = () => true) {
  const job = await api(`/api/jobs/${encodeURIComponent(id)}`);
  const output = await api(`/api/jobs/${encodeURIComponent(id)}/output`);
  if (!latest()) return;
  const cancel = job.state === "running" && meta && !meta.read_only
    ? el("button", { class: "danger", "data-testid": "cancel-job", onclick: () => api(`/api/jobs/${encodeURIComponent(id)}/cancel`, { method: "POST" }).catch((e) => box.append(problem(e))) }, "Cancel") : null;
  // a flow the job wrote: its page, once the job succeeded
  const flows = job.state === "succeeded" ? job.writes.filter((w) => w.endsWith(".flow.json")) : [];
  fill(box, 
    el("h2", {}, `Job ${job.id}`),
    el("div", { class: "row" }, el("span", { class: `badge ${job.state === "succeeded" ? "ok" : job.state}`, "data-testid": "job-state" }, job.state),
      el("code", { title: job.argv.join(" ") }, job.argv.map(shownArg).join(" ")), job.exit_code !== null ? el("span", { class: "muted" }, `exit ${job.exit_code}`) : null, cancel),
    job.writes.length ? el("p", {}, `writes: ${job.writes.join(", ")}`) : null,
    flows.length ? el("p", { "data-testid": "job-flows" }, "The flow: ", flows.map((f) => el("a", { href: flowHref(f) }, f, " "))) : null,
    job.left_out && job.left_out.length ? el("div", { class: "box problems", "data-testid": "left-out" },
      el("strong", {}, `Left out ${job.left_out.length} session log(s) with a line that cannot be read:`),
      el("ul", {}, job.left_out.map((x) => el("li", {}, x)))) : null,
    job.dagster_links.length ? el("p", {}, "Dagster UI: ", job.dagster_links.map((u) => el("a", { href: u, target: "_blank" }, u.split("/").pop() + " "))) : null,
    el("pre", { "data-testid": "job-output" }, output || "(no output yet)"),
    job.artifacts.length ? el("div", { class: "artifacts" }, el("h2", {}, "Artifacts"), el("ul", {}, job.artifacts.map((a) => artifactView(job, a)))) : null,
  );
}

// A domain picker: the domains of the sessions found, or another typed in.
function domainPicker(domains) {
  const other = el("input", { type: "text", size: 16, "aria-label": "another domain", hidden: true, placeholder: "letters, digits, - _ ." });
  const pick = el("select", { "data-testid": "domain-picker" }, domains.map((d) => el("option", { value: d }, d)), el("option", { value: "" }, "another…"));
  const sync = () => { other.hidden = pick.value !== ""; };
  pick.addEventListener("change", sync);
  sync();
  const box = el("span", { class: "row" }, pick, other);
  Object.defineProperty(box, "value", { get: () => (pick.value || other.value.trim()), set: (v) => { if (domains.includes(v)) { pick.value = v; sync(); } } });
  box.pick = pick;
  return box;
}

export async function jobsPage(opened) {
  const [list, flows, sessions] = await Promise.all([api("/api/jobs"), api("/api/flows"), api("/api/sessions?limit=200")]);
  const folders = [...new Set(sessions.items.flatMap((s) => [s.path, ...s.copies]).map((p) => p.split("/").slice(0, -1).join("/")))].sort();
  const domains = sessions.facets.domain || [];
  const kind = el("select", { id: "job-kind", "aria-label": "job" }, Object.keys(FORMS).map((k) => el("option", { value: k }, k)));
  const fields = el("div", { class: "row" });
  const inputs = {};
  const build = () => {
    fill(fields, );
    for (const [name, label, type] of FORMS[kind.value]) {
      let input;
      const valid = flows.items.filter((f) => f.valid && (type !== "served" || f.role !== "staged"));
      if (type === "flow" || type === "served") input = el("select", {}, valid.map((f) => el("option", { value: f.name }, f.role === "staged" ? `${f.name} (staged)` : f.name)));
      else if (type === "folder") input = el("select", {}, folders.map((f) => el("option", { value: f }, f)));
      else if (type === "domain") input = domainPicker(domains);
      else if (type === "check") input = el("input", { type: "checkbox" });
      else if (type === "number") input = el("input", { type: "number", step: 0.05, min: 0, max: 1, value: 0.3 });
      else input = el("input", { type: "text", size: 34, placeholder: name === "out" ? "flows/NAME.flow.json" : "" });
      if (type === "domain") input.pick.name = name;
      else input.name = name;
      inputs[name] = input;
      fields.append(el("label", {}, `${label} `, input));
    }
    // learning a folder of one domain's logs (logs/<domain>): that domain is picked
    if (inputs.sessions && inputs.domain) {
      const follow = () => { inputs.domain.value = inputs.sessions.value.split("/").pop(); };
      inputs.sessions.addEventListener("change", follow);
      follow();
    }
  };
  kind.addEventListener("change", build);
  build();
  const detail = el("div", { class: "box" }, el("p", { class: "muted" }, "Start a job, or pick one below."));
  const message = el("div");
  const start = el("button", { "data-testid": "start-job", disabled: meta && meta.read_only, onclick: async () => {
    const params = {};
    fill(message, );
    for (const [name, , type] of FORMS[kind.value]) {
      const input = inputs[name];
      if (type === "check") params[name] = input.checked;
      else if (type === "number") {
        const value = input.value.trim() === "" ? NaN : Number(input.value);
        if (!(value >= 0 && value <= 1)) {  // stretto/console/threshold.py's rule and words; the API refuses it too (422)
          input.setAttribute("aria-invalid", "true");
          fill(message, problem(new Error(`${name}: a number from 0 to 1, not ${input.value || "nothing"}`)));
          input.focus();
          return;
        }
        input.removeAttribute("aria-invalid");
        params[name] = value;
      } else if (input.value) params[name] = input.value;
    }
    try {
      const job = await api("/api/jobs", { method: "POST", body: { kind: kind.value, params } });
      open(job.id);
      await refresh();
    } catch (error) {
      fill(message, problem(error));
    }
  } }, "Start");
  // each job has its own address, /jobs/<id>: opening one changes it, a reload opens it again
  const open = (id) => {
    current = id;
    if (location.pathname !== jobPath(id)) history.pushState({}, "", jobPath(id));
    document.title = `Job ${id} · stretto console`;
  };
  const columns = [["job", (j) => j.id], ["state", (j) => j.state], ["started", (j) => j.started_unix_ms], ["finished", (j) => j.finished_unix_ms]];
  const jobRow = (j) => el("tr", { class: "clickable", "data-job": j.id, onclick: () => { open(j.id); show().catch((e) => fill(detail, problem(e))); } },
    el("td", {}, j.id), el("td", {}, el("span", { class: `badge ${j.state === "succeeded" ? "ok" : j.state}` }, j.state)),
    el("td", {}, when(j.started_unix_ms)), el("td", {}, when(j.finished_unix_ms)));
  const table = localTable({ "data-testid": "jobs" }, columns, list.items, jobRow, { what: "job" });
  let current = opened || (list.running ? list.running.id : list.items[0]?.id);
  let draws = 0;
  const show = () => { const draw = ++draws; return showJob(detail, current, () => draw === draws); };
  const refresh = async () => {
    const now = await api("/api/jobs");
    table.update(now.items);
    if (current) await show();
  };
  fill(page, el("h1", {}, "Jobs"),
    el("div", { class: "box" }, el("div", { class: "row" }, "job", kind, fields, start), message,
      el("p", { class: "muted" }, "One job at a time; each runs the stretto command in a process of its own. Output and artifacts stay under console/jobs/ in the data directory.")),
    detail, el("h2", {}, "All jobs"), table);
  await refresh();
  let pending = null;
  on("job", (event) => {
    const ended = event.state !== "running" && event.state !== "cancelling";
    if (event.id === current) {
      const pre = detail.querySelector("[data-testid=job-output]");
      if (pre && event.output_tail) pre.textContent = event.output_tail;
      const state = detail.querySelector("[data-testid=job-state]");
      if (state) state.textContent = event.state;
      if (ended || event.state === "cancelling") detail.querySelector("[data-testid=cancel-job]")?.remove();  // nothing left to cancel
    }
    if (ended) {
      clearTimeout(pending);
      pending = setTimeout(() => refresh().catch((e) => fill(message, problem(e))), 100);
    }
  });
}
