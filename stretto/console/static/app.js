// The console's pages: one shell (index.html), one module per page, data from /api.
import { overviewPage } from "./pages/overview.js";
import { sessionsPage, sessionPage } from "./pages/sessions.js";
import { flowsPage, flowPage } from "./pages/flows.js";
import { jobsPage } from "./pages/jobs.js";

export const page = document.getElementById("page");
export let meta = null;
const listeners = { changed: [], job: [] };

export class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

// GET (or another method, with a JSON body) an API path; the mutation header is always sent.
export async function api(path, { method = "GET", body } = {}) {
  const options = { method, headers: { "X-Stretto-Console": "1" } };
  if (body !== undefined) {
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  const answer = await fetch(path, options);
  const type = answer.headers.get("content-type") || "";
  const data = type.includes("json") ? await answer.json() : await answer.text();
  if (!answer.ok) throw new ApiError(answer.status, data.error || String(data));
  return data;
}

// An element from a tag, attributes and children (strings are text, never HTML).
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "class") node.className = v;
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  // a row that opens something on a click is reached with Tab and opened with Enter or Space
  if (tag === "tr" && node.classList.contains("clickable")) node.tabIndex = 0;
  return node;
}

// A table's head: one column head per label.
export function thead(labels) {
  return el("thead", {}, el("tr", {}, labels.map((h) => el("th", { scope: "col" }, h))));
}

// Replace a node's children, leaving out null, undefined and false (replaceChildren would
// show them as text).
export function fill(node, ...children) {
  node.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
}

export function fmt(n, digits = 2) {
  if (n === null || n === undefined) return "—";
  if (typeof n !== "number") return String(n);
  return Number.isInteger(n) ? n.toLocaleString("en") : n.toFixed(digits);
}

// A flow's page: its path under the data directory, each part encoded (slashes kept).
export const flowHref = (name) => `/flows/${name.split("/").map(encodeURIComponent).join("/")}`;

export function when(ms) {
  return ms ? new Date(ms).toISOString().replace("T", " ").slice(0, 19) + " UTC" : "—";
}

// A column head: a button that sorts by it when `sorted` is given ("ascending", "descending"
// or "none"), its state said by aria-sort.
export function columnHead(label, sorted, onsort) {
  if (!onsort) return el("th", { scope: "col" }, label);
  const arrow = sorted === "ascending" ? " ▲" : sorted === "descending" ? " ▼" : "";
  return el("th", { scope: "col", "aria-sort": sorted },
    el("button", { class: "sort", type: "button", onclick: onsort, "data-testid": `sort-${label}` }, label, arrow));
}

// A table sorted and searched in the browser (all its rows are there): columns are
// [label, value to sort by (item) => …, or null]; each item is drawn by row(item). Above it,
// a box to find text in its rows; when nothing matches, says so with a button to clear it.
// Its `update(items)` redraws the rows alone: a live refresh keeps what is typed and the focus.
export function localTable(attrs, columns, items, row, { find = true, what = "row" } = {}) {
  let by = null, descending = false;
  const body = el("tbody");
  const search = el("input", { type: "search", placeholder: `Find in these ${what}s`, "aria-label": `find in these ${what}s`, "data-testid": "find-in-table" });
  const head = el("thead");
  const draw = () => {
    const needle = search.value.trim().toLowerCase();
    let shown = [...items];
    if (by !== null) {
      const value = columns[by][1];
      shown.sort((a, b) => {
        const x = value(a), y = value(b);
        const order = x === y ? 0 : x === null || x === undefined ? 1 : y === null || y === undefined ? -1 : x < y ? -1 : 1;
        return descending ? -order : order;
      });
    }
    const rows = shown.map(row).filter((r) => !needle || r.textContent.toLowerCase().includes(needle));
    fill(head, el("tr", {}, columns.map(([label, value], n) => columnHead(label,
      value ? (by === n ? (descending ? "descending" : "ascending") : "none") : null,
      value ? () => { descending = by === n ? !descending : false; by = n; draw(); } : null))));
    if (!rows.length) {
      const clear = needle ? el("button", { class: "secondary", type: "button", onclick: () => { search.value = ""; draw(); search.focus(); } }, "Clear the search") : null;
      fill(body, el("tr", { class: "empty" }, el("td", { colspan: columns.length, "data-testid": "empty" },
        needle ? `No ${what} holds “${search.value.trim()}”. ` : `No ${what}s yet.`, clear)));
    } else fill(body, rows);
  };
  search.addEventListener("input", draw);
  draw();
  const table = el("table", attrs, head, body);
  const box = el("div", { class: "local-table" }, find ? el("div", { class: "row" }, search) : null, table);
  box.update = (fresh) => { items = fresh; draw(); };
  return box;
}

export function problem(error) {
  return el("div", { class: "box problems", role: "alert" }, el("strong", {}, "Problem: "), error.message || String(error));
}

export function on(event, handler) { listeners[event].push(handler); }

export function go(path) {
  history.pushState({}, "", path);
  route();
}

function events() {
  const source = new EventSource("/api/events");
  const status = document.getElementById("status");
  const mode = meta && meta.read_only ? "read-only · " : "";  // stays shown
  source.onopen = () => { status.textContent = `${mode}live`; };
  source.onerror = () => { status.textContent = `${mode}reconnecting…`; };
  for (const name of Object.keys(listeners)) {
    source.addEventListener(name, (e) => {
      const data = JSON.parse(e.data);
      for (const handler of listeners[name]) handler(data);
    });
  }
}

// [path, page, its tab in the header, its title]
const routes = [
  [/^\/$/, overviewPage, "overview", () => "Overview"],
  [/^\/sessions$/, sessionsPage, "sessions", () => "Sessions"],
  [/^\/sessions\/(.+)$/, sessionPage, "sessions", (key) => `Session ${key}`],
  [/^\/flows$/, flowsPage, "flows", () => "Flows"],
  [/^\/flows\/(.+)$/, flowPage, "flows", (name) => `Flow ${name}`],
  [/^\/jobs$/, jobsPage, "jobs", () => "Jobs"],
  [/^\/jobs\/([^/]+)$/, jobsPage, "jobs", (id) => `Job ${id}`],
];

async function route() {
  listeners.changed = [];
  listeners.job = [];
  const path = location.pathname;
  for (const [pattern, render, nav, title] of routes) {
    const match = path.match(pattern);
    if (!match) continue;
    const parts = match.slice(1).map(decodeURIComponent);
    document.title = `${title(...parts)} · stretto console`;
    for (const a of document.querySelectorAll("nav a")) {
      a.classList.toggle("active", a.dataset.nav === nav);
      if (a.dataset.nav === nav) a.setAttribute("aria-current", "page");
      else a.removeAttribute("aria-current");
    }
    fill(page, el("p", { class: "muted" }, "Loading…"));
    try {
      await render(...parts);
    } catch (error) {
      fill(page, problem(error));
    }
    return;
  }
  document.title = "No such page · stretto console";
  fill(page, el("h1", {}, "No such page"));
}

document.addEventListener("keydown", (e) => {
  const row = e.target.closest && e.target.closest("tr.clickable");
  if (!row || e.target !== row || (e.key !== "Enter" && e.key !== " ")) return;
  e.preventDefault();
  row.click();
});

document.addEventListener("click", (e) => {
  const a = e.target.closest("a");
  if (a && a.getAttribute("href")?.startsWith("#")) return;  // the skip link, in-page links
  if (!a || a.target || !a.href.startsWith(location.origin) || a.hasAttribute("download")) return;
  const url = new URL(a.href);
  if (url.pathname.startsWith("/api/") || url.pathname.startsWith("/static/")) return;
  e.preventDefault();
  go(url.pathname + url.search);
});
window.addEventListener("popstate", route);

// Signing out forgets the cookie; the console then asks for the address with the token.
async function signOut() {
  await api("/api/logout", { method: "POST" }).catch(() => null);
  location.assign("/");
}

meta = await api("/api/meta").catch(() => null);
const signOutButton = document.getElementById("sign-out");
if (meta && meta.auth.startsWith("token")) {
  signOutButton.hidden = false;
  signOutButton.addEventListener("click", signOut);
}
if (meta && meta.read_only) document.getElementById("status").textContent = "read-only";
events();
route();
