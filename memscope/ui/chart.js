// memscope's live memory chart: an anywidget front-end module (AFM) that draws with BokehJS.
//
// One module serves two widget classes (memscope/ui/chart.py):
// * _BokehJS, one per kernel: carries BokehJS (bokeh.min.js + bokeh-api.min.js, read from the installed bokeh
//   wheel) in its state. Its initialize() only publishes that text to this window's registry.
// * MemoryChart: references the loader (trait _bokehjs = "IPY_MODEL_<id>"), injects BokehJS at most once per
//   window (a classic <script> from a blob: URL, after checking window.Bokeh), then draws. Its lines arrive as
//   custom messages that carry only what changed (memscope.ui.chart.ChartWire): per line, the points to keep and
//   a float32 tail. They are applied once per window to a store shared by every view of the chart; a store that
//   missed a message (a reload, a second view of a model made before it) asks the kernel for the whole window.
//   Phases, marks and labels are the synced `meta` trait. On every change the ColumnDataSources update in place.
// Only anywidget 0.9 APIs are used: the default export { initialize, render }, model.get/set/on/off/save_changes/
// send, and (when the host has it) model.widget_manager.get_model.

const REGISTRY_KEY = "__memscope_bokehjs__";
const REQUEST = "memscope-bokehjs?";
const REPLY = "memscope-bokehjs";
const DATA_MSG = "memscope-data";
const WINDOW_REQUEST = "memscope-window?";
const STORES_KEY = "__memscope_chart_lines__";

// Stacking order, bottom first (memscope.model.ROLES, main first), and one colour per role everywhere.
const ROLES = ["main", "dataloader_worker", "compile_worker", "rank", "wrapper", "helper", "other"];
const ROLE_COLORS = {
  main: "#4c78a8",
  dataloader_worker: "#f58518",
  compile_worker: "#b279a2",
  rank: "#54a24b",
  wrapper: "#9d755d",
  helper: "#72b7b2",
  other: "#bab0ac",
};
const LINES = [
  // key in data, legend label, style
  ["tree_pss", "tree PSS (total)", { line_color: "#1f2d3d", line_width: 1.2 }],
  ["main_rss", "main RSS", { line_color: "#e45756", line_width: 2 }],
  ["tree_rss", "tree RSS (sum)", { line_color: "#888888", line_width: 1, line_dash: "dotted" }],
  ["host_available", "host available", { line_color: "#2e7d32", line_width: 1.5, line_dash: "dashed" }],
  ["limit", "limit", { line_color: "#c62828", line_width: 2, line_dash: "dashed" }],
];
const PHASE_COLORS = { train: "#54a24b", eval: "#f58518" };
const PHASE_OTHER = "#7b61ff";
const MAX_PHASES = 400;
const MiB = 1024 * 1024;
const GiB = 1024 * MiB;

// ---------------------------------------------------------------- BokehJS, at most once per window

function registry() {
  const g = globalThis;
  if (!g[REGISTRY_KEY]) g[REGISTRY_KEY] = { sources: {}, waiters: {}, loads: {}, asked: {}, via: {} };
  return g[REGISTRY_KEY];
}

function publishSources(version, sources, via) {
  const reg = registry();
  if (!version || !sources || !sources.core || !sources.api) return null;
  if (!reg.sources[version]) {
    reg.sources[version] = sources;
    reg.via[version] = via;  // how this window got BokehJS's text: "loader", "widget_manager" or "kernel"
  }
  for (const resolve of reg.waiters[version] || []) resolve(reg.sources[version]);
  delete reg.waiters[version];
  return reg.sources[version];
}

function bokehFor(version) {
  const B = globalThis.Bokeh;
  if (!B) return null;
  const b = B[version] || (B.version === version ? B : null);
  return b && b.Plotting ? b : null;
}

function runScript(text) {
  return new Promise((resolve, reject) => {
    const url = URL.createObjectURL(new Blob([text], { type: "text/javascript" }));
    const script = document.createElement("script");
    script.src = url;
    script.async = false;
    script.dataset.memscope = "bokehjs";
    script.onload = () => { URL.revokeObjectURL(url); resolve(); };
    script.onerror = () => { URL.revokeObjectURL(url); reject(new Error("memscope: BokehJS could not be loaded")); };
    document.head.appendChild(script);
  });
}

function loaderId(model) {
  const ref = model.get("_bokehjs");
  return typeof ref === "string" && ref.startsWith("IPY_MODEL_") ? ref.slice("IPY_MODEL_".length) : null;
}

function withTimeout(promise, ms) {
  return Promise.race([promise, new Promise((_, reject) => setTimeout(() => reject(new Error("timeout")), ms))]);
}

// BokehJS's text: published by the loader's initialize() in this window, or read from the loader model through
// the widget manager, or (hosts that instantiate models lazily and expose no widget manager) asked of the kernel.
async function sourcesFor(model, version) {
  const reg = registry();
  if (reg.sources[version]) return reg.sources[version];
  const id = loaderId(model);
  const wm = model.widget_manager;
  if (id && wm && typeof wm.get_model === "function") {
    try {
      const loader = await withTimeout(Promise.resolve(wm.get_model(id)), 15000);
      const got = publishSources(version, { core: loader.get("core"), api: loader.get("api") }, "widget_manager");
      if (got) return got;
    } catch (e) {
      console.debug("memscope: BokehJS loader model not reachable through the widget manager", e);
    }
  }
  if (reg.sources[version]) return reg.sources[version];
  const waiting = new Promise((resolve) => (reg.waiters[version] = reg.waiters[version] || []).push(resolve));
  if (!reg.asked[version]) {
    reg.asked[version] = true;
    model.send({ type: REQUEST });
  }
  return waiting;
}

function onReply(msg) {
  if (msg && msg.type === REPLY) publishSources(msg.version, { core: msg.core, api: msg.api }, "kernel");
}

function ensureBokeh(model) {
  const version = model.get("_bokeh_version");
  const ready = bokehFor(version);
  if (ready) return Promise.resolve(ready);
  const reg = registry();
  if (!reg.loads[version]) {
    const load = (async () => {
      const { core, api } = await sourcesFor(model, version);
      if (!(globalThis.Bokeh && globalThis.Bokeh[version])) await runScript(core);
      if (!bokehFor(version)) await runScript(api);
      const b = bokehFor(version);
      if (!b) throw new Error(`memscope: BokehJS ${version} did not register`);
      return b;
    })();
    reg.loads[version] = load;
    load.catch(() => { if (reg.loads[version] === load) delete reg.loads[version]; });
  }
  return reg.loads[version];
}

// ---------------------------------------------------------------- the lines this window holds

// One store per chart (its _uid) per window: every view and every copy of the model share it, so a message is
// applied once (its seq says whether it was) and a second view draws at once.
function storeFor(model) {
  const g = globalThis;
  const stores = (g[STORES_KEY] ||= new Map());
  const uid = model.get("_uid") || "";
  let s = stores.get(uid);
  if (!s) {
    s = { seq: 0, lines: {}, views: new Set(), asked: 0, whole: false };
    stores.set(uid, s);
  }
  return s;
}

function floats(b) {
  if (!b) return [];
  const view = b instanceof ArrayBuffer ? new Uint8Array(b) : new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
  const copy = view.slice();  // aligned for Float32Array, whatever offset the message had
  return Array.from(new Float32Array(copy.buffer, 0, copy.byteLength >> 2));
}

function askWindow(model, store) {
  // One request in flight: a kernel busy with a long cell answers them all when it is free, each with the whole
  // window. Asked again only if none came in 30 s.
  const now = Date.now();
  if (now - store.asked < 30000) return;
  store.asked = now;
  model.send({ type: WINDOW_REQUEST });
}

// Applies a ChartWire message to the store; true when the lines changed.
export function applyLines(store, msg, buffers) {
  if (!msg || msg.type !== DATA_MSG || !Array.isArray(msg.series) || !Array.isArray(msg.keys)) return false;
  const whole = msg.base === null || msg.base === undefined;
  if (!whole && msg.base !== store.seq) return false;
  const next = {};
  for (const key of msg.keys) next[key] = whole ? { t: [], y: [] } : (store.lines[key] || { t: [], y: [] });
  for (const [key, k, ti, yi] of msg.series) {
    const line = next[key];
    if (!line) continue;
    const t = floats(buffers && buffers[ti]), y = floats(buffers && buffers[yi]);
    line.t.length = Math.min(line.t.length, k);
    line.y.length = Math.min(line.y.length, k);
    for (const v of t) line.t.push(v);
    for (const v of y) line.y.push(v);
  }
  store.lines = next;
  store.seq = msg.seq;
  if (whole || msg.base === 0) store.building = true;  // base 0: built up from nothing, so whole too
  if (store.building && !msg.more) { store.whole = true; store.building = false; store.asked = 0; }
  return true;
}

// The store's lines in the shape columns() reads, with the meta trait (phases, marks, labels).
export function chartData(store, meta) {
  const data = { ...(meta || {}), tree_pss_by_role: {} };
  for (const [key, line] of Object.entries(store.lines)) {
    if (key.startsWith("role:")) data.tree_pss_by_role[key.slice(5)] = line;
    else data[key] = line;
  }
  return data;
}

function onLines(model, msg, buffers) {
  if (!msg || msg.type !== DATA_MSG) return;
  const store = storeFor(model);
  if (!(msg.base === null || msg.base === undefined) && msg.base !== store.seq) {
    if (msg.seq > store.seq) askWindow(model, store);  // missed some: the whole window once
    return;
  }
  // A change in several parts is drawn once, after its last.
  if (applyLines(store, msg, buffers) && !msg.more) for (const v of store.views) v();
}

function hookLines(model) {
  const store = storeFor(model);
  if (!store.models) store.models = new WeakSet();
  if (store.models.has(model)) return store;
  store.models.add(model);
  model.on("msg:custom", (msg, buffers) => onLines(model, msg, buffers));
  return store;
}

// ---------------------------------------------------------------- data → columns

function series(d) {
  const t = (d && Array.isArray(d.t)) ? d.t : [];
  const y = (d && Array.isArray(d.y)) ? d.y : [];
  const n = Math.min(t.length, y.length);
  return { t: t.slice(0, n), y: y.slice(0, n) };
}

function num(v) {
  return v === null || v === undefined ? NaN : +v;
}

function sameT(list) {
  const a = list[0].t;
  for (const s of list) {
    if (s.t.length !== a.length) return false;
    for (let i = 0; i < a.length; i++) if (s.t[i] !== a[i]) return false;
  }
  return true;
}

// Roles on one time axis. RunSeries gives every role the same t; otherwise the union of the times, each role
// holding its last value inside its own span and 0 outside it.
function alignRoles(byRole) {
  const parts = {};
  for (const [role, d] of Object.entries(byRole || {})) {
    const s = series(d);
    if (s.t.length) (parts[ROLES.includes(role) ? role : "other"] ||= []).push(s);
  }
  // Roles memscope does not know are folded into "other" (summed on the union of their times).
  const roles = {};
  for (const [k, list] of Object.entries(parts)) roles[k] = list.length === 1 ? list[0] : sumOnUnion(list);
  const present = ROLES.filter((r) => roles[r]);
  if (!present.length) return { t: [], cols: {}, present };
  const list = present.map((r) => roles[r]);
  if (sameT(list)) {
    const cols = {};
    for (const r of present) cols[r] = roles[r].y.map((v) => { const x = num(v); return isFinite(x) ? x : 0; });
    return { t: list[0].t.map(num), cols, present };
  }
  const t = union(list);
  const cols = {};
  for (const r of present) cols[r] = holdOn(roles[r], t);
  return { t, cols, present };
}

function union(list) {
  const all = [];
  for (const s of list) for (const v of s.t) all.push(num(v));
  all.sort((a, b) => a - b);
  const out = [];
  for (const v of all) if (!out.length || out[out.length - 1] !== v) out.push(v);
  return out;
}

function holdOn(s, t) {
  const out = new Array(t.length).fill(0);
  const first = num(s.t[0]), last = num(s.t[s.t.length - 1]);
  let j = 0;
  for (let i = 0; i < t.length; i++) {
    if (t[i] < first || t[i] > last) continue;
    while (j + 1 < s.t.length && num(s.t[j + 1]) <= t[i]) j++;
    const v = num(s.y[j]);
    out[i] = isFinite(v) ? v : 0;
  }
  return out;
}

function sumOnUnion(list) {
  const t = union(list);
  const y = new Array(t.length).fill(0);
  for (const s of list) holdOn(s, t).forEach((v, i) => { y[i] += v; });
  return { t, y };
}

const FAR_LINES = ["host_available", "limit"];
const FAR_FACTOR = 4;

// Everything the plot needs from one data snapshot, already scaled to display units.
export function columns(data) {
  data = data || {};
  const stack = alignRoles(data.tree_pss_by_role);
  const total = stack.t.map((_, i) => stack.present.reduce((acc, r) => acc + stack.cols[r][i], 0));
  const lines = { tree_pss: { t: stack.t, y: total } };
  for (const key of ["main_rss", "tree_rss", "host_available", "limit"]) {
    const s = series(data[key]);
    lines[key] = { t: s.t.map(num), y: s.y.map(num) };
  }
  let yMax = 0, ownMax = 0, tMin = Infinity, tMax = -Infinity;
  for (const [key, s] of Object.entries(lines)) {
    for (const v of s.y) if (isFinite(v) && v > yMax) yMax = v;
    if (!FAR_LINES.includes(key)) for (const v of s.y) if (isFinite(v) && v > ownMax) ownMax = v;
    if (s.t.length) { tMin = Math.min(tMin, s.t[0]); tMax = Math.max(tMax, s.t[s.t.length - 1]); }
  }
  // 22 GiB available would flatten a 400 MiB run into the axis: such lines start hidden (legend click shows
  // them), and the units follow the run's own memory.
  const far = ownMax > 0 && yMax > FAR_FACTOR * ownMax;
  if (far) yMax = ownMax;
  const phases = (Array.isArray(data.phases) ? data.phases : [])
    .map((p) => Array.isArray(p) ? { name: p[0], start_s: p[1], end_s: p[2] } : p)
    .filter((p) => p && isFinite(num(p.start_s)))
    .slice(-MAX_PHASES);
  for (const p of phases) {
    tMax = Math.max(tMax, num(p.start_s));
    if (isFinite(num(p.end_s))) tMax = Math.max(tMax, num(p.end_s));
  }
  const span = isFinite(tMax) ? tMax - Math.min(0, isFinite(tMin) ? tMin : 0) : 0;
  const yu = yMax >= GiB ? { factor: GiB, name: "GiB" } : { factor: MiB, name: "MiB" };
  // Time stays in seconds: the axis's ticker and formatter pick s, m:ss or h:mm from what is in view.
  const xu = { factor: 1, name: "s" };
  const sx = (v) => v / xu.factor, sy = (v) => v / yu.factor;

  const stackData = { x: stack.t.map(sx) };
  const base = new Array(stack.t.length).fill(0);
  for (const r of ROLES) {
    const vals = stack.cols[r];
    const lo = base.slice();
    if (vals) for (let i = 0; i < base.length; i++) base[i] += vals[i];
    stackData[`${r}_lo`] = lo.map(sy);
    stackData[`${r}_hi`] = base.map(sy);
  }
  const lineData = {};
  for (const [key, s] of Object.entries(lines)) lineData[key] = { x: s.t.map(sx), y: s.y.map(sy) };

  const tEnd = isFinite(tMax) ? tMax : 0;
  const farKeys = far ? FAR_LINES.filter((k) => lines[k].y.some((v) => v > FAR_FACTOR * ownMax)) : [];
  const phaseData = phases.map((p) => ({
    name: String(p.name ?? ""),
    left: sx(num(p.start_s)),
    right: sx(isFinite(num(p.end_s)) ? num(p.end_s) : tEnd),
  }));

  const markData = (Array.isArray(data.marks) ? data.marks : [])
    .filter((m) => m && isFinite(num(m.t_s)))
    .map((m) => ({ x: sx(num(m.t_s)), top: sy(yMax), text: String(m.text ?? "") }));

  let points = stack.t.length * stack.present.length;
  for (const key of ["main_rss", "tree_rss", "host_available", "limit"]) points += lines[key].t.length;
  const present = new Set(stack.present);
  for (const [key, s] of Object.entries(lines)) if (s.t.length) present.add(key);
  return { farKeys, stackData, lineData, phaseData, markData, xu, yu, present, points, span: sx(span),
           tMin: isFinite(tMin) ? Math.min(0, tMin) : 0, tEnd };
}

// ---------------------------------------------------------------- time as a person reads it

// One format for the whole axis, chosen from what is in view [start, end]: "45 s" under 100 s, "m:ss" under an
// hour, "h:mm" beyond (h:mm:ss when ten minutes or less are in view); tenths or hundredths where the ticks are
// closer than a second. Self-contained: its source is also the axis formatter's code.
export function timeFormat(start, end) {
  const m = Math.max(Math.abs(start), Math.abs(end));
  if (!(m >= 100)) return "s";
  if (m < 3600) return "m:ss";
  return end - start > 600 ? "h:mm" : "h:mm:ss";
}

export function fmtElapsed(v, format, step) {
  const d = step >= 1 || !(step > 0) ? 0 : Math.min(3, Math.ceil(-Math.log10(step) - 1e-9));
  const sign = v < 0 ? "-" : "";
  const k = Math.pow(10, d);
  let x = Math.round(Math.abs(v) * k) / k;
  if (format === "s") return sign + x.toFixed(d) + " s";
  const two = (n, dd) => (n < 10 ? "0" : "") + n.toFixed(dd);
  let h = 0;
  if (format !== "m:ss") { h = Math.floor(x / 3600); x -= 3600 * h; }
  const mm = Math.floor(x / 60 + 1e-9);
  const ss = Math.max(0, x - 60 * mm);
  if (format === "m:ss") return `${sign}${mm}:${two(ss, d)}`;
  if (format === "h:mm") return `${sign}${h}:${two(mm, 0)}`;
  return `${sign}${h}:${two(mm, 0)}:${two(ss, d)}`;
}

// The window a paused chart shows, in the run's time: a pan left of the start shows empty space before 0, which is
// no time of the run ("paused at -12.9 s–41.4 s" read as a negative time).
export function pausedRange(start, end) {
  const a = Math.max(0, start), b = Math.max(a, end);
  const f = timeFormat(a, b);
  const step = (b - a) / 100;
  return `${fmtElapsed(a, f, step)}–${fmtElapsed(b, f, step)}`;
}

const FORMAT_CODE = `const timeFormat = ${timeFormat.toString()};
const fmtElapsed = ${fmtElapsed.toString()};
const step = ticks.length > 1 ? Math.abs(ticks[1] - ticks[0]) : 1;
return fmtElapsed(tick, timeFormat(xr.start, xr.end), step);`;

// Ticks on round times: 1-2-5 below 10 s, then 10 s, 15 s, 30 s, 1 min ... 30 min, then 1, 2, 3, 6, 12 h ...
function timeTicker(B) {
  return new B.CompositeTicker({ tickers: [
    new B.AdaptiveTicker({ base: 10, mantissas: [1, 2, 5], min_interval: 0, max_interval: 5, num_minor_ticks: 0 }),
    new B.AdaptiveTicker({ base: 60, mantissas: [1, 2, 5, 10, 15, 20, 30], min_interval: 10, max_interval: 1800,
                           num_minor_ticks: 0 }),
    new B.AdaptiveTicker({ base: 3600, mantissas: [1, 2, 3, 6, 12, 24, 48, 96], min_interval: 3600,
                           max_interval: Infinity, num_minor_ticks: 0 }),
  ] });
}

// Phase labels that fit: each is drawn at its band's left edge and needs about its text's width; eval and named
// phases are placed first (an epoch's eval band is narrow beside its train band), then the others where room is
// left. ``pxPerS``: the plot's scale.
export function fitLabels(phases, pxPerS, charPx = 6, gapPx = 6) {
  const order = phases.map((p, i) => i).sort((i, j) => (phases[i].name === "train") - (phases[j].name === "train") || i - j);
  const placed = [];
  for (const i of order) {
    const p = phases[i];
    const a = p.left * pxPerS, z = a + 3 + String(p.name).length * charPx + gapPx;
    if (placed.every(([pa, pz]) => z <= pa || a >= pz)) placed.push([a, z, i]);
  }
  return placed.map(([, , i]) => i).sort((i, j) => i - j);
}

// ---------------------------------------------------------------- the chart

export const WINDOWS = [[0, "whole run"], [60, "last 1 min"], [300, "last 5 min"], [900, "last 15 min"],
                        [3600, "last 1 h"]];
const NARROW_PX = 720;  // below this width the legend goes under the plot, in rows

function buildChart(B, model, onFollow) {
  const xr = new B.Range1d({ start: 0, end: 1 });
  const fig = B.Plotting.figure({
    height: model.get("height") || 320,
    sizing_mode: "stretch_width",
    // The title (a command line, often long) is a line of HTML above the plot, cut with an ellipsis: in Bokeh's
    // title row it pushed the toolbar out of a narrow output.
    x_range: xr,
    y_range: new B.DataRange1d({ start: 0, only_visible: true }),
    x_axis_label: "elapsed (s)",
    y_axis_label: "memory (MiB)",
    // The wheel scrolls the page: the wheel zoom is there, inactive, until the person turns it on in the toolbar
    // (Bokeh's "auto" would turn it on at the first click in the plot, a legend click included).
    tools: "xpan,xwheel_zoom,xbox_zoom,reset,save",
    active_scroll: null,
    toolbar_location: "above",
  });
  fig.toolbar.active_scroll = null;
  fig.xgrid.grid_line_alpha = 0.4;
  fig.ygrid.grid_line_alpha = 0.4;
  fig.xaxis.ticker = timeTicker(B);
  fig.xaxis.formatter = new B.CustomJSTickFormatter({ args: { xr }, code: FORMAT_CODE });

  const stackSource = new B.ColumnDataSource({ data: { x: [], ...Object.fromEntries(ROLES.flatMap((r) => [[`${r}_lo`, []], [`${r}_hi`, []]])) } });
  const areas = {};
  for (const r of ROLES) {
    areas[r] = fig.varea({
      x: { field: "x" }, y1: { field: `${r}_lo` }, y2: { field: `${r}_hi` },
      source: stackSource, fill_color: ROLE_COLORS[r], fill_alpha: 0.6,
    });
    areas[r].name = r;
  }
  const lineSources = {}, lines = {};
  for (const [key, label, style] of LINES) {
    lineSources[key] = new B.ColumnDataSource({ data: { x: [], y: [] } });
    lines[key] = fig.line({ x: { field: "x" }, y: { field: "y" }, source: lineSources[key], ...style });
    lines[key].name = label;
  }
  // Hover: the values of the tree's PSS and of main's RSS at the mouse's time.
  const elapsedHover = new B.CustomJSHover({ args: { xr }, code: `const timeFormat = ${timeFormat.toString()};
const fmtElapsed = ${fmtElapsed.toString()};
return fmtElapsed(value, timeFormat(xr.start, xr.end), (xr.end - xr.start) / 100);` });
  const hover = new B.HoverTool({
    renderers: [lines.tree_pss, lines.main_rss],
    tooltips: [["", "$name"], ["elapsed", "@x{custom}"], ["memory", "@y{0.00} MiB"]],
    formatters: { "@x": elapsedHover },
    mode: "vline",
    line_policy: "nearest",
  });
  fig.add_tools(hover);

  const legend = new B.Legend({ items: [], click_policy: "hide", label_text_font_size: "11px", spacing: 0,
                                 glyph_height: 14, glyph_width: 18, padding: 6, border_line_alpha: 0 });
  fig.add_layout(legend, "right");
  let legendAt = "right";
  // Narrow (JupyterLab with its side panel open): the legend goes below the plot, in columns, so that the plot
  // keeps the width.
  function place(width) {
    const want = width > 0 && width < NARROW_PX ? "below" : "right";
    const ncols = Math.max(1, Math.floor((width - 20) / 130));
    if (want === legendAt && (want === "right" || legend.ncols === ncols)) return;
    if (want !== legendAt) {
      fig[legendAt] = fig[legendAt].filter((r) => r !== legend);
      legend.setv(want === "below" ? { orientation: "horizontal", ncols } : { orientation: "vertical", ncols: "auto" });
      fig[want] = [...fig[want], legend];
      legendAt = want;
    } else {
      legend.ncols = ncols;
    }
  }

  const phaseLabels = new B.ColumnDataSource({ data: { x: [], text: [] } });
  fig.add_layout(new B.LabelSet({
    x: { field: "x" }, y: { value: 4 }, y_units: "screen", x_offset: 3, text: { field: "text" },
    source: phaseLabels, text_font_size: "10px", text_color: "#555555", text_alpha: 0.9,
  }));
  // Marks: where stacks were taken (near the limit, a stall, by hand), a dashed line each.
  const markSource = new B.ColumnDataSource({ data: { x: [], top: [], text: [] } });
  fig.segment({
    x0: { field: "x" }, y0: { value: 0 }, x1: { field: "x" }, y1: { field: "top" },
    source: markSource, line_color: "#c62828", line_dash: "dashed", line_width: 1,
  });
  fig.add_layout(new B.LabelSet({
    x: { field: "x" }, y: { value: 18 }, y_units: "screen", x_offset: 3, text: { field: "text" },
    source: markSource, text_font_size: "10px", text_color: "#c62828",
  }));
  // Phase bands: one VStrip glyph over a source (BokehJS >= 3.2: no DOM node a band); older BokehJS, a pool of
  // BoxAnnotations, each 9 DOM nodes in the page (an epoch's train and eval bands, up to MAX_PHASES of them).
  const bandSource = new B.ColumnDataSource({ data: { x0: [], x1: [], color: [] } });
  const strips = typeof fig.vstrip === "function";
  if (strips) {
    fig.vstrip({
      x0: { field: "x0" }, x1: { field: "x1" }, source: bandSource, fill_color: { field: "color" },
      fill_alpha: 0.10, line_alpha: 0, level: "underlay",
    });
  }
  const boxes = [];
  let legendKey = "", unitKey = "", phases = [], last = null;
  const autoVis = {}, userSet = new Set();

  // Following: the x range shows the whole run, or its last `window` seconds, and moves with each update. A pan
  // or zoom by the person (any change of the range not made here) pauses it; Reset or "follow live" resumes it.
  let following = true, setting = false, plotWidth = 0;
  let windowS = model.get("window_s") || 0;
  function follow() {
    if (!last) return;
    const { tMin, tEnd } = last;
    let start = windowS > 0 ? Math.max(tMin, tEnd - windowS) : tMin;
    let end = tEnd;
    if (!(end > start)) end = start + 1;
    const pad = (end - start) * 0.02;
    setting = true;
    try {
      if (xr.start !== start || xr.end !== end + pad) xr.setv({ start, end: end + pad, reset_start: start, reset_end: end + pad });
    } finally { setting = false; }
  }
  function setFollowing(on) {
    if (on === following) return;
    following = on;
    if (on) follow();
    onFollow(on, xr.start, xr.end);
  }
  const onRange = () => {
    if (!setting && following) setFollowing(false);
    else if (!following) onFollow(false, xr.start, xr.end);
    relabel();
  };
  xr.properties.start.change.connect(onRange);
  xr.properties.end.change.connect(onRange);
  fig.on_event("reset", { execute: () => queueMicrotask(() => setFollowing(true) || follow()) });

  // Phase bands at least 3 px wide and labels that fit, for the scale in view.
  function relabel() {
    const span = xr.end - xr.start;
    const pxPerS = plotWidth > 0 && span > 0 ? plotWidth / span : 0;
    const minW = pxPerS > 0 ? 3 / pxPerS : 0;
    if (strips) {
      bandSource.data = {
        x0: phases.map((p) => p.left), x1: phases.map((p) => Math.max(p.right, p.left + minW)),
        color: phases.map((p) => PHASE_COLORS[p.name] || PHASE_OTHER),
      };
    } else {
      phases.forEach((p, i) => {
        const b = boxes[i];
        const right = Math.max(p.right, p.left + minW);
        if (b && b.right !== right) b.right = right;
      });
    }
    const shown = pxPerS > 0 ? fitLabels(phases, pxPerS) : [];
    phaseLabels.data = { x: shown.map((i) => phases[i].left), text: shown.map((i) => phases[i].name) };
  }

  function update(data) {
    const c = columns(data);
    last = c;
    stackSource.data = c.stackData;
    for (const [key] of LINES) lineSources[key].data = c.lineData[key];

    // Phase bands without VStrip: a pool of BoxAnnotations, reused in place; extra ones hidden.
    // New boxes are created with their final values and added in one go (a BoxAnnotation has no view until the
    // plot has built it: it must not be changed in between).
    const added = [];
    (strips ? [] : c.phaseData).forEach((p, i) => {
      const props = { left: p.left, right: p.right, fill_color: PHASE_COLORS[p.name] || PHASE_OTHER, visible: true };
      if (boxes[i]) {
        const b = boxes[i];
        if (b.left !== props.left || b.right !== props.right || b.fill_color !== props.fill_color || !b.visible) {
          b.setv(props);
        }
      } else {
        boxes[i] = new B.BoxAnnotation({ ...props, level: "underlay", fill_alpha: 0.10, line_alpha: 0 });
        added.push(boxes[i]);
      }
    });
    if (added.length) fig.center = [...fig.center, ...added];
    for (let i = c.phaseData.length; i < boxes.length; i++) if (boxes[i].visible) boxes[i].visible = false;
    phases = c.phaseData;
    if (following) follow();
    relabel();
    markSource.data = {
      x: c.markData.map((m) => m.x), top: c.markData.map((m) => m.top), text: c.markData.map((m) => m.text),
    };

    const uk = c.yu.name;
    if (uk !== unitKey) {
      unitKey = uk;
      fig.yaxis.axis_label = `memory (${c.yu.name})`;
      hover.tooltips = [["", "$name"], ["elapsed", "@x{custom}"], ["memory", `@y{0.00} ${c.yu.name}`]];
    }
    // Re-decided on every update (a run that grows toward its limit brings the limit back into view), until
    // the user clicks that legend entry: from then on the click decides.
    for (const k of FAR_LINES) {
      if (userSet.has(k)) continue;
      if (k in autoVis && lines[k].visible !== autoVis[k]) { userSet.add(k); continue; }
      const want = !c.farKeys.includes(k);
      if (lines[k].visible !== want) lines[k].visible = want;
      autoVis[k] = want;
    }
    // data.labels renames the lines (the GPU chart reuses this chart for GPU memory).
    const names = (data && typeof data.labels === "object" && data.labels) || {};
    const lk = [...c.present].sort().join(",") + JSON.stringify(names);
    if (lk !== legendKey) {
      legendKey = lk;
      const items = [];
      for (const r of [...ROLES].reverse()) {
        if (c.present.has(r)) items.push(new B.LegendItem({ label: { value: r }, renderers: [areas[r]] }));
      }
      for (const [key, label] of LINES) {
        const name = String(names[key] || label);
        if (lines[key].name !== name) lines[key].name = name;
        if (key !== "tree_pss" && c.present.has(key)) items.push(new B.LegendItem({ label: { value: name }, renderers: [lines[key]] }));
      }
      legend.items = items;
    }
    return c.points;
  }

  // The axis label follows the format the ticks use.
  let axisLabel = "";
  function relabelAxis() {
    const label = `elapsed (${timeFormat(xr.start, xr.end)})`;
    if (label !== axisLabel) { axisLabel = label; fig.xaxis.axis_label = label; }
  }
  xr.properties.start.change.connect(relabelAxis);
  xr.properties.end.change.connect(relabelAxis);

  return {
    fig, update, place,
    follow: () => setFollowing(true),
    setWindow: (s) => { windowS = s; setFollowing(true); follow(); },
    setPlotWidth: (px) => { if (px > 0 && px !== plotWidth) { plotWidth = px; relabel(); } },
    state: () => ({ following, start: xr.start, end: xr.end }),
  };
}

// The line above the plot: the window (whole run or its last N minutes) and, once the person has panned or zoomed,
// "paused at …" with "follow live" one click away.
function makeBar(model, onWindow, onFollowClick) {
  const title = document.createElement("div");
  title.className = "memscope-chart-title";
  title.style.cssText = "font:bold 12px sans-serif;color:#333;white-space:nowrap;overflow:hidden;" +
                        "text-overflow:ellipsis;margin:2px 0;";
  const bar = document.createElement("div");
  bar.className = "memscope-chart-bar";
  bar.style.cssText = "display:flex;flex-wrap:wrap;gap:8px;align-items:center;font:12px sans-serif;color:#555;" +
                      "min-height:22px;margin:0 0 2px 0;";
  const label = document.createElement("label");
  label.textContent = "show ";
  const select = document.createElement("select");
  select.className = "memscope-chart-window";
  select.style.cssText = "font:12px sans-serif;";
  for (const [s, text] of WINDOWS) {
    const o = document.createElement("option");
    o.value = String(s);
    o.textContent = text;
    select.appendChild(o);
  }
  select.value = String(model.get("window_s") || 0);
  if (select.value === "") select.value = "0";
  select.addEventListener("change", () => onWindow(+select.value));
  label.appendChild(select);
  const note = document.createElement("span");
  note.className = "memscope-chart-follow";
  const button = document.createElement("button");
  button.className = "memscope-chart-follow-btn";
  button.textContent = "follow live";
  button.style.cssText = "font:12px sans-serif;padding:0 6px;display:none;cursor:pointer;";
  button.addEventListener("click", onFollowClick);
  bar.append(label, note, button);
  const setTitle = () => {
    title.textContent = model.get("title") || "";
    title.title = title.textContent;
    title.style.display = title.textContent ? "" : "none";
  };
  setTitle();
  return {
    bar, title, setTitle,
    setWindow: (s) => { select.value = String(s); },
    show(following, start, end) {
      if (following) {
        note.textContent = "";
        button.style.display = "none";
        bar.dataset.following = "true";
      } else {
        note.textContent = `paused at ${pausedRange(start, end)} (you panned or zoomed):`;
        button.style.display = "";
        bar.dataset.following = "false";
      }
    },
  };
}

function setStatus(el, text) {
  let status = el.querySelector(".memscope-chart-status");
  if (!status) {
    status = document.createElement("div");
    status.className = "memscope-chart-status";
    status.style.cssText = "position: absolute; top: 45%; left: 0; right: 0; text-align: center; z-index: 1;" +
                           "font: 12px sans-serif; color: #666; pointer-events: none;";
    el.appendChild(status);
  }
  status.textContent = text;
  status.style.display = text ? "" : "none";
}

async function render({ model, el }) {
  el.classList.add("memscope-chart");
  el.style.width = "100%";
  el.style.position = "relative";
  el.style.minHeight = `${model.get("height") || 320}px`;
  setStatus(el, "loading BokehJS…");
  model.on("msg:custom", onReply);
  let B;
  try {
    B = await ensureBokeh(model);
  } catch (e) {
    setStatus(el, String(e && e.message || e));
    throw e;
  }
  setStatus(el, "");
  let chart = null;
  const bar = makeBar(
    model,
    (s) => {
      model.set("window_s", s);
      model.save_changes();
      if (chart) chart.setWindow(s);
    },
    () => { if (chart) chart.follow(); },
  );
  el.append(bar.title, bar.bar);
  const container = document.createElement("div");
  container.style.width = "100%";
  el.appendChild(container);
  chart = buildChart(B, model, (following, start, end) => bar.show(following, start, end));
  const { fig, update } = chart;
  bar.show(true, 0, 0);
  let view = null;
  const measure = () => {
    if (view && view.frame) chart.setPlotWidth(view.frame.bbox.width);
  };

  const store = hookLines(model);
  let pending = false;
  const apply = () => {
    pending = false;
    const points = update(chartData(store, model.get("meta")));
    setStatus(el, points ? "" : "waiting for samples…");
    measure();
    if (model.get("rendered_points") !== points) {
      model.set("rendered_points", points);
      model.save_changes();
    }
  };
  const schedule = () => { if (!pending) { pending = true; queueMicrotask(apply); } };
  const onTitle = bar.setTitle;
  const onHeight = () => {
    fig.height = model.get("height") || 320;
    el.style.minHeight = `${fig.height}px`;
  };
  const onWindow = () => {
    const s = model.get("window_s") || 0;
    bar.setWindow(s);
    chart.setWindow(s);
  };

  chart.place(el.getBoundingClientRect().width);
  apply();
  view = await B.Plotting.show(fig, container);
  measure();
  // The legend's place follows the width (a side panel opened or closed), and the labels the plot's scale.
  let lastWidth = -1;
  const resized = new ResizeObserver(() => {
    const width = Math.round(el.getBoundingClientRect().width);
    if (width === lastWidth || width === 0) return;
    lastWidth = width;
    chart.place(width);
    requestAnimationFrame(() => requestAnimationFrame(measure));
  });
  resized.observe(el);
  store.views.add(schedule);
  if (!store.whole) askWindow(model, store);  // a page that has not had this window whole (a reload, a new tab)
  model.on("change:meta", schedule);
  model.on("change:title", onTitle);
  model.on("change:height", onHeight);
  model.on("change:window_s", onWindow);
  return () => {
    resized.disconnect();
    store.views.delete(schedule);
    model.off("change:meta", schedule);
    model.off("change:title", onTitle);
    model.off("change:height", onHeight);
    model.off("change:window_s", onWindow);
    model.off("msg:custom", onReply);
    try { view.remove(); } catch (e) { /* already gone */ }
  };
}

function initialize({ model }) {
  // The loader model (memscope.ui.chart._BokehJS) makes BokehJS's text known to this window; it injects nothing.
  const core = model.get("core");
  if (core) publishSources(model.get("_bokeh_version"), { core, api: model.get("api") }, "loader");
  // A chart takes its lines from the model's creation on, before any view (a view shows them at once), and
  // lets them go with the model (a re-run cell closes its old dashboard: its window would stay in the page).
  const uid = model.get("_uid");
  if (uid) {
    hookLines(model);
    return () => { const stores = globalThis[STORES_KEY]; if (stores) stores.delete(uid); };
  }
}

export default { initialize, render };
