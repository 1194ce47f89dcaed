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
  return node;
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

const routes = [
  [/^\/$/, overviewPage, "overview"],
  [/^\/sessions$/, sessionsPage, "sessions"],
  [/^\/sessions\/(.+)$/, sessionPage, "sessions"],
  [/^\/flows$/, flowsPage, "flows"],
  [/^\/flows\/(.+)$/, flowPage, "flows"],
  [/^\/jobs$/, jobsPage, "jobs"],
];

async function route() {
  listeners.changed = [];
  listeners.job = [];
  const path = location.pathname;
  for (const [pattern, render, nav] of routes) {
    const match = path.match(pattern);
    if (!match) continue;
    for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.nav === nav);
    fill(page, el("p", { class: "muted" }, "Loading…"));
    try {
      await render(...match.slice(1).map(decodeURIComponent));
    } catch (error) {
      fill(page, problem(error));
    }
    return;
  }
  fill(page, el("h1", {}, "No such page"));
}

document.addEventListener("click", (e) => {
  const a = e.target.closest("a");
  if (!a || a.target || !a.href.startsWith(location.origin) || a.hasAttribute("download")) return;
  const url = new URL(a.href);
  if (url.pathname.startsWith("/api/") || url.pathname.startsWith("/static/")) return;
  e.preventDefault();
  go(url.pathname + url.search);
});
window.addEventListener("popstate", route);

meta = await api("/api/meta").catch(() => null);
if (meta && meta.read_only) document.getElementById("status").textContent = "read-only";
events();
route();
