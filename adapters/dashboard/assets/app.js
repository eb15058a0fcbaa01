// The Taskhoster dashboard: one page, no build step, no library. Its data
// comes from the host's HTTP API (task lists, actions, the event log) and
// from /_dash (figures of every queue, leases, failure groups, a task's
// record) and a live socket that pushes the figures when they change.
//
// The token is kept in sessionStorage and sent only as an Authorization
// header, or as the live socket's first message: never in a URL. Every
// piece of a task (its item, progress, reasons) is put on the page as
// text, never as HTML.
"use strict";

const TOKEN_KEY = "taskhoster-dashboard-token";
const HOUR = 3600;
const STATUSES = ["pending", "processing", "finished", "failed"];

const state = {
  token: sessionStorage.getItem(TOKEN_KEY) || "",
  host: "",
  user: null,
  queues: new Map(), // name -> figures (the server's queueJSON)
  rates: new Map(),  // name -> Map(unix second -> [posted, finished, failed])
  skew: 0,           // server clock minus this browser's clock, in ms
  socket: null,
  retryIn: 1000,
  view: null,        // the current page's hooks: {figures(), tick(), changed(name)}
  range: HOUR,       // seconds the queue page's chart shows
  trailPages: 64,    // log API pages (4 MiB each) one read of a task's trail asks at most; tests make it small
};

// ---- small helpers --------------------------------------------------------

// h builds an element: attributes (on* are listeners), then children
// (strings become text nodes, never HTML).
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (k === "dataset") Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function svg(tag, attrs) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  return el;
}

const serverNow = () => Date.now() + state.skew;

function ago(ms) {
  if (ms < 0) ms = 0;
  const s = Math.floor(ms / 1000);
  if (s < 60) return s + " s";
  const m = Math.floor(s / 60);
  if (m < 60) return m + " min " + (s % 60) + " s";
  const hrs = Math.floor(m / 60);
  if (hrs < 48) return hrs + " h " + (m % 60) + " min";
  return Math.floor(hrs / 24) + " d " + (hrs % 24) + " h";
}

function when(ms) {
  if (ms === null || ms === undefined) return "—";
  return new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
}

function short(value, n) {
  const s = typeof value === "string" ? value : JSON.stringify(value);
  return s.length > n ? s.slice(0, n - 1) + "…" : s;
}

function headers(extra) {
  const hd = Object.assign({}, extra || {});
  if (state.token) hd["Authorization"] = "Bearer " + state.token;
  return hd;
}

class APIError extends Error {
  constructor(status, body) {
    super((body && body.message) || "HTTP " + status);
    this.status = status;
    this.code = body && body.error;
  }
}

// api calls the host's API (same origin). State-changing calls always go
// with a JSON content type: a cross-site form cannot send one without a
// CORS preflight, which this server never grants, and the server refuses
// cross-site browser requests that change state anyway.
async function api(method, path, body) {
  const opts = { method, headers: headers(), cache: "no-store" };
  if (method !== "GET") {
    opts.headers["Content-Type"] = "application/json";
    opts.body = body === undefined ? "{}" : JSON.stringify(body);
  }
  const r = await fetch(path, opts);
  const text = await r.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
  if (!r.ok) throw new APIError(r.status, data);
  return data;
}

const enc = encodeURIComponent;

// ---- sign-in --------------------------------------------------------------

function showSignIn() {
  const signedIn = state.token !== "";
  document.getElementById("signin").hidden = signedIn;
  document.getElementById("whoami").hidden = !signedIn;
  document.getElementById("user").textContent = state.user ? "signed in as " + state.user : "";
}

function setToken(tok) {
  state.token = tok;
  if (tok) sessionStorage.setItem(TOKEN_KEY, tok);
  else sessionStorage.removeItem(TOKEN_KEY);
  start();
}

document.getElementById("signin").addEventListener("submit", (e) => {
  e.preventDefault();
  const input = document.getElementById("token");
  const tok = input.value.trim();
  input.value = "";
  if (tok) setToken(tok);
});
document.getElementById("signout").addEventListener("click", () => setToken(""));

// ---- data -----------------------------------------------------------------

function mergeRates(name, seconds) {
  let m = state.rates.get(name);
  if (!m) state.rates.set(name, (m = new Map()));
  // A second's counts only grow, so the larger of two readings is the
  // newer: an hour read while snapshots keep coming does not undo them.
  for (const [sec, p, f, x] of seconds) {
    const was = m.get(sec) || [0, 0, 0];
    m.set(sec, [Math.max(p, was[0]), Math.max(f, was[1]), Math.max(x, was[2])]);
  }
  const oldest = Math.floor(serverNow() / 1000) - HOUR;
  for (const sec of m.keys()) if (sec <= oldest) m.delete(sec);
}

// take records a summary of the host (the API's answer or a snapshot),
// and says which queues changed.
function take(summary) {
  state.skew = summary.now - Date.now();
  state.host = summary.host;
  state.user = summary.user;
  const seen = new Set();
  const changed = [];
  for (const q of summary.queues) {
    seen.add(q.name);
    const before = state.queues.get(q.name);
    const key = JSON.stringify(Object.assign({}, q, { rates: null }));
    if (!before || before.key !== key) changed.push(q.name);
    q.key = key;
    state.queues.set(q.name, q);
    mergeRates(q.name, q.rates);
  }
  for (const name of [...state.queues.keys()]) {
    if (!seen.has(name)) {
      state.queues.delete(name);
      state.rates.delete(name);
      changed.push(name);
    }
  }
  document.getElementById("host").textContent = state.host;
  showSignIn();
  return changed;
}

async function start() {
  if (state.socket) {
    state.socket.onclose = null;
    state.socket.close();
    state.socket = null;
  }
  state.queues.clear();
  state.rates.clear();
  const main = document.getElementById("main");
  try {
    take(await api("GET", "/_dash/api/queues"));
  } catch (e) {
    if (e.status === 401 && state.token) {
      sessionStorage.removeItem(TOKEN_KEY);
      state.token = "";
      showSignIn();
      main.replaceChildren(h("p", { class: "error", id: "error" }, "That token is not a user of this host. Try again."));
      return;
    }
    main.replaceChildren(h("p", { class: "error", id: "error" }, "Could not load the dashboard: " + e.message));
    return;
  }
  route();
  connect(false);
}

// catchUp reads the last hour of rates again: a snapshot carries only its
// last few seconds, so the seconds of a longer outage of the socket would
// stay a hole in the charts.
async function catchUp(ws) {
  let summary;
  try { summary = await api("GET", "/_dash/api/queues"); } catch (e) { return; }
  if (state.socket !== ws) return; // signed out or in meanwhile
  for (const q of summary.queues) if (state.queues.has(q.name)) mergeRates(q.name, q.rates);
  if (state.view) state.view.figures();
}

// connect opens the live socket; it says who we are in its first message.
// A socket that resumes after a lost one catches up on the rates.
function connect(resumed) {
  const live = document.getElementById("live");
  const ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/_dash/live");
  state.socket = ws;
  ws.onopen = () => ws.send(JSON.stringify({ token: state.token }));
  ws.onmessage = (msg) => {
    const m = JSON.parse(msg.data);
    if (m.type === "error") {
      live.textContent = "refused: " + m.message;
      return;
    }
    if (m.type !== "snapshot") return;
    state.retryIn = 1000;
    live.className = "live on";
    live.textContent = "live";
    const changed = take(m);
    if (state.view) {
      state.view.figures();
      for (const name of changed) state.view.changed(name);
    }
    if (resumed) { resumed = false; catchUp(ws); }
  };
  ws.onclose = () => {
    live.className = "live off";
    live.textContent = "reconnecting";
    if (state.socket !== ws) return;
    setTimeout(() => { if (state.socket === ws) connect(true); }, state.retryIn);
    state.retryIn = Math.min(state.retryIn * 2, 10000);
  };
}

// ---- routing --------------------------------------------------------------

window.addEventListener("hashchange", route);

// decoded is a part of the location's hash, decoded; a hand-made link's
// broken escape (#/q/%E0) is taken as it stands, naming no queue, rather
// than throw before the page starts.
function decoded(part) {
  try {
    return decodeURIComponent(part);
  } catch {
    return part;
  }
}

function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decoded);
  const main = document.getElementById("main");
  if (parts[0] === "q" && parts[1]) {
    const q = state.queues.get(parts[1]);
    if (!q) {
      state.view = null;
      main.replaceChildren(h("p", { class: "crumbs" }, h("a", { href: "#/" }, "Queues")), h("section", { class: "card", id: "missing" },
        h("h1", {}, "No such queue"),
        h("p", {}, "This host serves no queue by that name that you may see."),
        h("p", {}, h("a", { href: "#/" }, "All queues"))));
      return;
    }
    if (parts[2] === "t" && parts[3]) taskPage(main, q.name, parts[3]);
    else queuePage(main, q.name);
    return;
  }
  overview(main);
}

// ---- figures and charts ---------------------------------------------------

const FIGURES = [
  ["claimable", "Claimable"], ["delayed", "Delayed"], ["processing", "Processing"],
  ["finished", "Finished"], ["failed", "Failed"],
];

function figures(q) {
  const age = q.oldest === null ? "—" : ago(serverNow() - q.oldest);
  return h("dl", { class: "figures" },
    FIGURES.map(([k, label]) => h("div", { class: `figure ${k}${q.counts[k] > 0 ? " some" : ""}` },
      h("dt", {}, label), h("dd", { id: "count-" + k, dataset: { count: k } }, q.counts[k]))),
    h("div", { class: "figure" }, h("dt", {}, "Oldest claimable"), h("dd", { id: "oldest", class: "age", dataset: { oldest: q.oldest ?? "" } }, age)),
    h("div", { class: "figure" }, h("dt", {}, "Workers"), h("dd", { id: "workers" }, q.workers)),
    h("div", { class: "figure" }, h("dt", {}, "Claims waiting"), h("dd", { id: "waiting" }, q.waiting)));
}

function pausedBadge(q) {
  return q.paused
    ? h("span", { class: "badge paused", id: "paused" }, "paused")
    : h("span", { class: "badge running", id: "running" }, "running");
}

// RANGES are the spans the queue page's chart can show; the server keeps an hour.
const RANGES = [[3600, "1 hour"], [900, "15 min"], [300, "5 min"]];

const SERIES = [
  { name: "posted", cls: "posted" },
  { name: "finished", cls: "finished" },
  { name: "failed", cls: "failed" },
];

// chart draws the per-second counts of the last span seconds: one line
// per series, the newest second at the right edge, failed dashed so that
// the series differ by more than their colour.
function chart(name, big, span) {
  const m = state.rates.get(name) || new Map();
  const end = Math.floor(serverNow() / 1000);
  const W = span, H = big ? 180 : 48;
  const secs = [...m.keys()].filter((sec) => sec > end - span && sec <= end).sort((a, b) => a - b);
  const totals = [0, 0, 0];
  let peak = 1;
  for (const sec of secs) {
    const v = m.get(sec);
    for (let i = 0; i < 3; i++) { totals[i] += v[i]; peak = Math.max(peak, v[i]); }
  }
  const s = svg("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", class: big ? "chart big" : "chart", role: "img",
    "aria-label": `per second over the last ${span / 60} minutes: ${totals[0]} posted, ${totals[1]} finished, ${totals[2]} failed` });
  if (big) {
    for (const f of [0.25, 0.5, 0.75]) s.append(svg("line", { x1: 0, x2: W, y1: H * f, y2: H * f, class: "grid" }));
    for (let i = 1; i < 4; i++) s.append(svg("line", { x1: (i * W) / 4, x2: (i * W) / 4, y1: 0, y2: H, class: "grid" }));
  }
  const x = (sec) => W - (end - sec) - 0.5;
  const y = (v) => (H - (v / peak) * (H - 3)).toFixed(1);
  SERIES.forEach((ser, i) => {
    // Only the seconds with counts, and the zeros on either side of them:
    // a quiet hour is one flat line, not 3600 points.
    const pts = [`0,${H}`];
    let prev = null;
    for (const sec of secs) {
      if (prev !== sec - 1) pts.push(`${x(sec - 1)},${H}`);
      pts.push(`${x(sec)},${y(m.get(sec)[i])}`);
      prev = sec;
    }
    if (prev !== null && prev < end) pts.push(`${x(prev + 1)},${H}`);
    pts.push(`${W},${H}`);
    s.append(svg("polyline", { points: pts.join(" "), class: "series " + ser.cls, "vector-effect": "non-scaling-stroke" }));
  });
  const wrap = h("div", { class: big ? "chartbox big" : "chartbox" }, s);
  if (big) {
    const min = span / 60;
    wrap.append(h("div", { class: "axis" }, [4, 3, 2, 1].map((k) => h("span", {}, `−${(min * k) / 4} min`)), h("span", {}, "now")));
    wrap.append(h("div", { class: "peak" }, "peak " + peak + "/s"));
  }
  wrap.append(h("ul", { class: "legend" }, SERIES.map((ser, i) =>
    h("li", { class: ser.cls }, h("span", { class: "swatch" }), `${ser.name} ${totals[i]}`)),
    big ? null : h("li", {}, "last hour")));
  return wrap;
}

// ---- overview -------------------------------------------------------------

function overview(main) {
  const box = h("div", { id: "queues" });
  const cell = (q, k) => h("td", { class: `num count ${k}${q.counts[k] > 0 ? " some" : ""}` }, q.counts[k]);
  const render = () => {
    const qs = [...state.queues.values()];
    if (qs.length === 0) {
      box.replaceChildren(h("section", { class: "card", id: "nothing" },
        h("h2", {}, "No queue to show"),
        h("p", {}, state.token
          ? "None of this host's queues gives this user status, logs or manage access."
          : "Sign in with your token to see the queues you may look at. Without one, only queues whose status, logs or manage access is public are shown.")));
      return;
    }
    box.replaceChildren(h("section", { class: "card" }, h("table", { class: "overview" },
      h("thead", {}, h("tr", {},
        h("th", {}, "Queue"), h("th", {}, "State"),
        FIGURES.map(([, label]) => h("th", { class: "num" }, label)),
        h("th", { class: "num" }, "Oldest claimable"), h("th", { class: "num" }, "Workers"), h("th", { class: "num" }, "Claims waiting"),
        h("th", { class: "spark" }, "Last hour, per minute"))),
      h("tbody", {}, qs.map((q) => h("tr", { class: "queue", dataset: { queue: q.name } },
        h("td", {}, h("a", { class: "qname", href: "#/q/" + enc(q.name) }, q.name)),
        h("td", {}, pausedBadge(q), q.manage ? null : h("span", { class: "badge readonly" }, "read only")),
        FIGURES.map(([k]) => cell(q, k)),
        h("td", { class: "num" }, q.oldest === null ? "—" : ago(serverNow() - q.oldest)),
        h("td", { class: "num" }, q.workers),
        h("td", { class: "num" }, q.waiting),
        h("td", { class: "spark" }, sparkline(q.name))))))));
  };
  render();
  main.replaceChildren(h("h1", {}, "Queues"), box);
  state.view = { figures: render, changed() {}, tick: render };
}

// sparkline is a queue's last hour in bars of a minute each: posted above
// the line, finished and failed (stacked, failed darker) below it.
function sparkline(name) {
  const m = state.rates.get(name) || new Map();
  const end = Math.floor(serverNow() / 1000);
  const mins = Array.from({ length: 60 }, () => [0, 0, 0]);
  for (const [sec, v] of m) {
    const k = Math.floor((end - sec) / 60);
    if (k >= 0 && k < 60) for (let i = 0; i < 3; i++) mins[59 - k][i] += v[i];
  }
  const peak = Math.max(1, ...mins.map((v) => Math.max(v[0], v[1] + v[2])));
  const W = 120, H = 28, mid = H / 2;
  const s = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "sparkline", role: "img",
    "aria-label": `last hour: ${mins.reduce((a, v) => a + v[0], 0)} posted, ${mins.reduce((a, v) => a + v[1], 0)} finished, ${mins.reduce((a, v) => a + v[2], 0)} failed` });
  s.append(svg("line", { x1: 0, x2: W, y1: mid, y2: mid, class: "base" }));
  mins.forEach(([p, f, x], i) => {
    const bx = i * 2, scale = (mid - 1) / peak;
    if (p) s.append(svg("rect", { x: bx, width: 1.6, y: mid - p * scale, height: p * scale, class: "posted" }));
    if (f) s.append(svg("rect", { x: bx, width: 1.6, y: mid, height: f * scale, class: "finished" }));
    if (x) s.append(svg("rect", { x: bx, width: 1.6, y: mid + f * scale, height: x * scale, class: "failed" }));
  });
  return s;
}

// ---- a queue --------------------------------------------------------------

function queuePage(main, name) {
  const q = state.queues.get(name);
  const head = h("div", { class: "titlebar" });
  const banner = h("div", {});
  const figs = h("div", { id: "figures" });
  const ranges = h("span", { class: "ranges", role: "group", "aria-label": "Chart range" }, RANGES.map(([secs, label]) =>
    h("button", { type: "button", class: "range", "aria-pressed": String(secs === state.range), dataset: { range: secs }, onclick: () => {
      state.range = secs;
      for (const b of ranges.children) b.setAttribute("aria-pressed", String(Number(b.dataset.range) === secs));
      renderHead();
    } }, label)));
  const chartBox = h("section", { class: "card" }, h("div", { class: "titlebar" }, h("h2", {}, "Posted, finished and failed per second"), ranges), h("div", { id: "chart" }));
  const parts = [h("p", { class: "crumbs" }, h("a", { href: "#/" }, "Queues"), " / ", name), head, banner, figs, chartBox];
  const detail = { leases: h("div", { id: "leases" }), failures: h("div", { id: "failures" }), tasks: h("div", { id: "tasks" }) };
  const list = { status: "pending", order: "oldest", query: null, after: null, note: "" };
  let busy = false, again = false;

  let headKey = null;
  const renderHead = () => {
    const cur = state.queues.get(name);
    if (!cur) { route(); return; }
    figs.replaceChildren(figures(cur));
    chartBox.querySelector("#chart").replaceChildren(chart(name, true, state.range));
    // The title and buttons change only with the pause: rebuilding them on
    // every tick would disarm a purge button waiting for its second click.
    const key = `${cur.paused}/${cur.manage}`;
    if (key === headKey) return;
    headKey = key;
    const counts = () => state.queues.get(name)?.counts || cur.counts;
    const actions = cur.manage ? h("span", { class: "actions" },
      cur.paused
        ? h("button", { class: "action", dataset: { action: "resume" }, onclick: () => act("POST", `/${enc(name)}/resume`) }, "Resume")
        : h("button", { class: "action", dataset: { action: "pause" }, onclick: () => act("POST", `/${enc(name)}/pause`) }, "Pause"),
      confirmButton("purge-failed", "Purge failed", () => `Delete all ${counts().failed} failed?`, () => act("POST", `/${enc(name)}/purge?status=failed`)),
      confirmButton("purge-finished", "Purge finished", () => `Delete all ${counts().finished} finished?`, () => act("POST", `/${enc(name)}/purge?status=finished`)))
      : null;
    head.replaceChildren(...[h("h1", {}, name, " ", pausedBadge(cur), cur.manage ? null : h("span", { class: "badge readonly" }, "read only")), actions].filter(Boolean));
    banner.replaceChildren(...[
      cur.paused ? h("p", { class: "note", id: "paused-note" }, "Paused: claims wait until the queue is resumed; posts are still taken.") : null,
      cur.manage ? null : h("p", { class: "note info", id: "readonly" },
        "Read only: you see this queue's figures and charts. Its tasks, leases, failures and actions need manage access."),
    ].filter(Boolean));
  };

  // refresh reads what only manage users see; called on a change of the
  // queue, at most one at a time (a change meanwhile runs it once more).
  const refresh = async () => {
    const cur = state.queues.get(name);
    if (!cur || !cur.manage) return;
    if (busy) { again = true; return; }
    busy = true;
    try {
      const [d, page] = await Promise.all([
        api("GET", `/_dash/api/queues/${enc(name)}`),
        api("GET", `/${enc(name)}/tasks?` + new URLSearchParams(Object.assign(
          { status: list.status, order: list.order, limit: "50" },
          list.query ? { query: JSON.stringify(list.query) } : {}, list.after ? { after: list.after } : {}))),
      ]);
      state.skew = d.now - Date.now();
      renderLeases(detail.leases, name, d.leases);
      renderFailures(detail.failures, name, d);
      renderTasks(detail.tasks, name, page, list, refresh);
    } catch (e) {
      detail.tasks.replaceChildren(h("p", { class: "error" }, e.message));
    } finally {
      busy = false;
      if (again) { again = false; refresh(); }
    }
  };

  const act = async (method, path) => {
    try { await api(method, path); flash("Done"); } catch (e) { flash(e.message, true); }
    refresh();
  };

  if (q.manage) {
    parts.push(
      h("div", { class: "columns" },
        h("section", { class: "card" }, h("h2", {}, "Live leases"), detail.leases),
        h("section", { class: "card" }, h("h2", {}, "Failures by error"), detail.failures)),
      h("section", { class: "card" }, h("h2", {}, "Tasks"), searchForm(name, list, refresh), detail.tasks));
  }
  main.replaceChildren(...parts);
  renderHead();
  refresh();
  state.view = {
    figures: renderHead,
    changed: (n) => { if (n === name) refresh(); },
    tick: () => { renderHead(); tickLeases(detail.leases); },
  };
}

// confirmButton asks once more before it runs: a purge deletes for good.
function confirmButton(id, label, ask, run) {
  const b = h("button", { class: "action danger", dataset: { action: id } }, label);
  let armed = null;
  b.addEventListener("click", () => {
    if (armed) { clearTimeout(armed); armed = null; b.textContent = label; run(); return; }
    b.textContent = ask() + " Click again";
    armed = setTimeout(() => { armed = null; b.textContent = label; }, 4000);
  });
  return b;
}

function flash(text, bad) {
  let f = document.getElementById("flash");
  if (!f) { f = h("div", { id: "flash" }); document.body.append(f); }
  f.className = bad ? "bad" : "good";
  f.textContent = text;
  clearTimeout(flash.timer);
  flash.timer = setTimeout(() => f.remove(), 3000);
}

function renderLeases(box, name, leases) {
  if (leases.length === 0) { box.replaceChildren(h("p", { class: "muted" }, "No task is being worked on.")); return; }
  box.replaceChildren(h("table", {},
    h("thead", {}, h("tr", {}, h("th", {}, "Task"), h("th", {}, "Worker"), h("th", {}, "Attempt"), h("th", {}, "Time left"))),
    h("tbody", {}, leases.map((l) => h("tr", { dataset: { id: l.id } },
      h("td", {}, taskLink(name, l.id)),
      h("td", {}, l.worker),
      h("td", { class: "num" }, l.attempts),
      h("td", { class: "left", dataset: { until: l.until } }, ago(l.until - serverNow())))))));
}

function tickLeases(box) {
  for (const td of box.querySelectorAll("td.left")) {
    const left = Number(td.dataset.until) - serverNow();
    td.textContent = left > 0 ? ago(left) : "lapsed";
    td.classList.toggle("late", left <= 0);
  }
}

function taskLink(queue, id) {
  return h("a", { class: "task", href: `#/q/${enc(queue)}/t/${id}` }, id);
}

function renderFailures(box, name, d) {
  if (d.failures.length === 0) { box.replaceChildren(h("p", { class: "muted" }, "No failed task.")); return; }
  const note = d.looked >= 1000 ? h("p", { class: "muted" }, `Grouped from the newest ${d.looked} failed tasks.`) : null;
  box.replaceChildren(...(note ? [note] : []), ...d.failures.map((g) => h("div", { class: "group", dataset: { error: g.error } },
    h("h3", {}, h("code", {}, g.error), ` ${g.count} task${g.count === 1 ? "" : "s"}`, " ",
      h("span", { class: "muted" }, describeError(g.error)), " ",
      h("button", { class: "action", dataset: { action: "retry-group" }, onclick: async (e) => {
        e.target.disabled = true;
        let n = 0;
        for (const t of g.tasks) { try { await api("POST", `/${enc(name)}/${t.id}/retry`); n++; } catch (err) { /* retried meanwhile */ } }
        flash(`Retried ${n}`);
      } }, `Retry ${g.tasks.length} shown`)),
    h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "Task"), h("th", {}, "Attempts"), h("th", {}, "Failed at"), h("th", {}, "Reason"), h("th", {}, ""))),
      h("tbody", {}, g.tasks.map((t) => h("tr", { dataset: { id: t.id } },
        h("td", {}, taskLink(name, t.id)),
        h("td", { class: "num" }, t.attempts),
        h("td", {}, when(t.finishedAt)),
        h("td", { class: "json" }, t.failure === undefined ? "—" : short(t.failure, 80)),
        h("td", {}, h("button", { class: "action", dataset: { action: "retry" }, onclick: async (e) => {
          e.target.disabled = true;
          try { await api("POST", `/${enc(name)}/${t.id}/retry`); flash("Retried " + t.id); } catch (err) { flash(err.message, true); }
        } }, "Retry")))))))));
}

function describeError(code) {
  return ({
    attempts: "dead letters: out of attempts",
    failed: "failed by a worker",
    timeout: "older than the queue timeout",
    cancelled: "cancelled by a user",
    corrupt: "file found corrupt",
  })[code] || "";
}

function searchForm(name, list, refresh) {
  const status = h("select", { id: "status", "aria-label": "Status" }, STATUSES.map((s) => h("option", { value: s }, s)));
  const order = h("select", { id: "order", "aria-label": "Order" }, h("option", { value: "oldest" }, "oldest first"), h("option", { value: "newest" }, "newest first"));
  const search = h("input", { id: "search", type: "search", placeholder: 'task id, or a JSON Schema over the item: {"properties":{"url":{"const":"…"}}}', spellcheck: "false" });
  const err = h("span", { class: "error", id: "search-error" });
  const form = h("form", { class: "search", id: "search-form" }, status, order, search, h("button", { type: "submit" }, "Search"), err);
  const apply = (e) => {
    if (e) e.preventDefault();
    err.textContent = "";
    const text = search.value.trim();
    if (/^[0-9a-f]{16}$/.test(text)) { location.hash = `#/q/${enc(name)}/t/${text}`; return; }
    let query = null;
    if (text) {
      try { query = JSON.parse(text); } catch (ex) { err.textContent = "Not a task id, nor JSON: " + ex.message; return; }
    }
    Object.assign(list, { status: status.value, order: order.value, query, after: null });
    refresh();
  };
  form.addEventListener("submit", apply);
  status.addEventListener("change", apply);
  order.addEventListener("change", apply);
  return form;
}

function renderTasks(box, name, page, list, refresh) {
  const rows = page.tasks.map((t) => h("tr", { dataset: { id: t.id, status: t.status } },
    h("td", {}, taskLink(name, t.id)),
    h("td", {}, h("span", { class: "status " + t.status }, t.status)),
    h("td", { class: "num" }, t.attempts),
    h("td", {}, when(t.postedAt)),
    h("td", {}, t.error ? h("code", {}, t.error) : ""),
    h("td", { class: "json" }, short(t.item, 100))));
  const table = rows.length
    ? h("table", { id: "task-list" },
      h("thead", {}, h("tr", {}, h("th", {}, "Task"), h("th", {}, "Status"), h("th", {}, "Attempts"), h("th", {}, "Posted"), h("th", {}, "Error"), h("th", {}, "Item"))),
      h("tbody", {}, rows))
    : h("p", { class: "muted", id: "no-tasks" }, `No ${list.status} task${list.query ? " matches" : ""}.`);
  const pager = h("p", { class: "pager" },
    list.after ? h("button", { type: "button", onclick: () => { list.after = null; refresh(); } }, "First page") : null,
    page.next ? h("button", { type: "button", id: "next-page", onclick: () => { list.after = page.next; refresh(); } }, "Next page") : null);
  box.replaceChildren(table, pager);
}

// ---- a task ---------------------------------------------------------------

function taskPage(main, name, id) {
  const q = state.queues.get(name);
  const crumbs = h("p", { class: "crumbs" }, h("a", { href: "#/" }, "Queues"), " / ", h("a", { href: "#/q/" + enc(name) }, name), " / ", id);
  if (!q.manage) {
    main.replaceChildren(crumbs, h("p", { class: "note", id: "readonly" }, "A task's page needs manage access on its queue."));
    state.view = { figures() {}, changed() {}, tick() {} };
    return;
  }
  const record = h("section", { class: "card", id: "record" }, h("p", { class: "muted" }, "Loading…"));
  const trailBox = h("section", { class: "card" }, h("h2", {}, "Event trail"), h("div", { id: "trail" }, h("p", { class: "muted" }, "Loading…")));
  main.replaceChildren(crumbs, record, trailBox);
  let busy = false, again = false;
  // What this page has read of the event log: a refresh reads on from
  // there. Another task's page (or this one opened again) starts over.
  const log = trailLog(name, id);
  const view = { figures() {}, changed: (n) => { if (n === name) load(); }, tick() {} };

  const load = async () => {
    if (busy) { again = true; return; }
    busy = true;
    try {
      const { task: t, now } = await api("GET", `/_dash/api/queues/${enc(name)}/tasks/${enc(id)}`);
      state.skew = now - Date.now();
      renderRecord(record, name, t, load);
      if (q.logs) {
        if (await log.read(t.postedAt)) renderTrail(trailBox.querySelector("#trail"), name, id, log.lines(), log.reading());
        // A read that stopped at its bound goes on by itself: a finished
        // task's queue may never change again to ask for it.
        if (log.reading()) again = true;
      } else {
        trailBox.querySelector("#trail").replaceChildren(h("p", { class: "muted" }, "The event trail needs logs access on this queue."));
      }
    } catch (e) {
      record.replaceChildren(h("p", { class: "error", id: "error" }, e.status === 404 ? "No such task (it may have been cleaned)." : e.message));
    } finally {
      busy = false;
      // Once the page is left, nothing more is read for it.
      if (again && state.view === view) { again = false; load(); }
    }
  };
  state.view = view;
  load();
}

function renderRecord(box, name, t, reload) {
  const act = async (method, path) => {
    try { await api(method, path); flash("Done"); } catch (e) { flash(e.message, true); }
    reload();
  };
  const terminal = t.status === "finished" || t.status === "failed";
  const row = (k, v) => h("tr", {}, h("th", {}, k), h("td", {}, v));
  // A task without progress or a result says so rather than show "null"
  // (which a JSON value could also be).
  const json = (v) => v === null || v === undefined ? h("p", { class: "muted" }, "none") : h("pre", { class: "json" }, JSON.stringify(v, null, 2));
  box.replaceChildren(
    h("div", { class: "titlebar" },
      h("h1", {}, "Task ", h("code", {}, t.id), " ", h("span", { class: "status " + t.status, id: "task-status" }, t.status)),
      h("span", { class: "actions" },
        terminal ? null : h("button", { class: "action danger", dataset: { action: "cancel" }, onclick: () => act("DELETE", `/${enc(name)}/${t.id}`) }, "Cancel"),
        t.status === "failed" ? h("button", { class: "action", dataset: { action: "retry" }, onclick: () => act("POST", `/${enc(name)}/${t.id}/retry`) }, "Retry") : null,
        h("button", { class: "payload", dataset: { payload: "item" }, onclick: () => openBlob(JSON.stringify(t.item, null, 2)) }, "Open item ↗"))),
    h("table", { class: "fields" }, h("tbody", {},
      row("Status", t.status + (t.error ? ` (error ${t.error})` : "")),
      row("Attempts", String(t.attempts)),
      row("Posted", `${when(t.postedAt)} by ${t.postedBy ?? "anonymous"}`),
      row("Updated", when(t.updatedAt)),
      t.notBefore ? row("Not before", when(t.notBefore)) : null,
      t.priority ? row("Priority", String(t.priority)) : null,
      row("Lease", t.lease ? `${t.lease.worker}, ${ago(t.lease.until - serverNow())} left` : "—"),
      row("Finished", when(t.finishedAt)),
      row("Fetched", when(t.fetchedAt)))),
    h("div", { class: "payloads" },
      h("div", {}, h("h3", {}, "Item"), json(t.item)),
      h("div", {}, h("h3", {}, "Progress"), json(t.progress)),
      h("div", {}, h("h3", {}, t.status === "failed" ? "Failure" : "Result"), json(t.status === "failed" ? t.failure : t.result))));
}

// trailLog keeps what a task's page has read of the event log: for each day
// file from the task's posted day on, the offset reached and the task's
// lines found before it. The page reads the trail again on every change of
// the queue (up to four times a second on a busy one); reading on from
// where the last read ended costs the server only the lines written since,
// rather than the whole day file each time.
function trailLog(queue, id) {
  const days = new Map(); // day -> { offset, lines }
  let more = false;       // the last read stopped at its bound, short of the end
  let unshown = true;     // the trail changed since read last said so (at first: never shown)

  // see notes a change of what the trail shows.
  const see = () => { unshown = true; };

  // readDay reads day d on from where it was left, at most pages pages; it
  // says how many it used, and whether it stopped at that bound short of
  // the end (cut).
  const readDay = async (d, seen, pages) => {
    let used = 0;
    // The listed size is where the file ended when listed: past it there
    // is nothing to read yet, so an unchanged file costs no request.
    while (seen.offset < d.size && used < pages) {
      used++;
      const r = await fetch(`/_logs/tasks/${d.day}?offset=${seen.offset}`, { headers: headers(), cache: "no-store" });
      if (!r.ok) {
        const e = new APIError(r.status, await r.json().catch(() => null));
        // An offset that no longer starts a line is one into another file
        // by that name: the next read reads it from its start.
        if (e.code === "invalid_offset") { seen.offset = 0; seen.lines = []; see(); }
        throw e;
      }
      const text = await r.text();
      for (const line of text.split("\n")) {
        if (!line.includes(id)) continue;
        const ev = JSON.parse(line);
        if (ev.id === id && ev.queue === queue) { seen.lines.push(ev); see(); }
      }
      // An empty page is not the end: the day file holds every host's
      // lines, and a page may hold none this user may read. The end is
      // where the offset stops moving (short of the size: a line still
      // being written, read next time).
      const next = Number(r.headers.get("X-Next-Offset"));
      if (!(next > seen.offset)) return { used, cut: false };
      seen.offset = next;
    }
    return { used, cut: seen.offset < d.size };
  };

  return {
    // lines are the task's lines found so far, in the log's order.
    lines: () => [...days.keys()].sort().flatMap((day) => days.get(day).lines),
    // reading says the trail is not all read yet: the next read goes on.
    reading: () => more,

    // read reads what the log gained since the last read, at most
    // state.trailPages pages, and says whether the trail changed.
    async read(postedAt) {
      const from = new Date(postedAt).toISOString().slice(0, 10);
      const listed = (await api("GET", "/_logs/tasks")).filter((d) => d.day >= from);
      // A day pruned since leaves the trail, as it left the kept log.
      for (const day of days.keys()) {
        if (!listed.some((d) => d.day === day)) { days.delete(day); see(); }
      }
      let pages = state.trailPages, cut = false;
      for (const d of listed) {
        let seen = days.get(d.day);
        // Day files only grow; one shorter than what was read of it is
        // another file by that name, read again from its start.
        if (seen && d.size < seen.offset) { days.delete(d.day); see(); seen = null; }
        if (!seen) { seen = { offset: 0, lines: [] }; days.set(d.day, seen); }
        // The bound spent, what is left of the days waits for the next read.
        if (pages === 0) { cut ||= seen.offset < d.size; continue; }
        const got = await readDay(d, seen, pages);
        pages -= got.used;
        cut ||= got.cut;
      }
      if (cut !== more) { more = cut; see(); }
      const changed = unshown;
      unshown = false;
      return changed;
    },
  };
}

// renderTrail shows the lines found; while the log is still being read
// (reading), it says the trail may not be all there yet.
function renderTrail(box, name, id, lines, reading) {
  const note = reading ? h("p", { class: "note", id: "trail-reading" }, "Still reading the event log: later lines of this task may not show yet.") : null;
  if (lines.length === 0) {
    box.replaceChildren(...(note ? [note] : [h("p", { class: "muted" }, "No line of this task in the kept log.")]));
    return;
  }
  box.replaceChildren(...(note ? [note] : []), h("table", { id: "trail-table" },
    h("thead", {}, h("tr", {}, h("th", {}, "At"), h("th", {}, "Event"), h("th", {}, "Status"), h("th", {}, "Attempts"), h("th", {}, "Worker"), h("th", {}, "Payloads"))),
    h("tbody", {}, lines.map((ev) => h("tr", { class: "event", dataset: { event: ev.event } },
      h("td", {}, ev.at.replace("T", " ").replace("Z", "")),
      h("td", {}, h("span", { class: "event " + ev.event }, ev.event + (ev.error && ev.error !== ev.event ? ` (${ev.error})` : ""))),
      h("td", {}, ev.status),
      h("td", { class: "num" }, ev.attempts),
      h("td", {}, ev.worker ?? "—"),
      h("td", {}, ev.archived.map((body) => {
        const file = PAYLOAD_FILES[body] || body;
        return h("button", { class: "payload", dataset: { file }, onclick: () => openPayload(name, id, file) }, file + " ↗");
      })))))));
}

// PAYLOAD_FILES are the archive's files, by the names event lines list
// them under ("archived").
const PAYLOAD_FILES = { item: "item.json", progress: "progress.jsonl", result: "result.json", error: "error.json" };

// openPayload fetches an archived body with the token in the header and
// opens it in a new tab as a blob: URL, so the token is in no URL.
async function openPayload(queue, id, file) {
  try {
    const r = await fetch(`/_logs/payloads/${enc(queue)}/${id}/${enc(file)}`, { headers: headers(), cache: "no-store" });
    if (!r.ok) throw new APIError(r.status, await r.json().catch(() => null));
    openBlob(await r.text(), file.endsWith(".jsonl") ? "text/plain" : "application/json");
  } catch (e) { flash(e.message, true); }
}

// openBlob shows text in a new tab; progress lines as plain text, since a
// browser offers to download a type it does not show.
function openBlob(text, type) {
  const url = URL.createObjectURL(new Blob([text], { type: type || "application/json" }));
  const a = h("a", { href: url, target: "_blank", rel: "noopener" });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60000);
}

// Ages, time left and the charts' right edge follow this browser's clock
// between snapshots; nothing is asked of the server for it.
setInterval(() => { if (state.view) state.view.tick(); }, 1000);

start();
