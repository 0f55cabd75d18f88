// memscope fit's notebook chart: an anywidget front-end module that draws with BokehJS (memscope/ui/fit_view.py).
//
// x is the size, y the peak. Drawn: each probe's peak (a cross where it died), the probe going now (hollow, its
// peak so far), the fitted line out to the target, the limit and the limit less the margin (dashed), the target
// (a vertical line) and the forecast at it; the anchor (the probe with the program's own allocator settings, the
// others ran with a fixed mmap threshold) as a hollow square, with a dashed line from it to the forecast. BokehJS is the one the dashboard's loader widget carries (trait
// _bokehjs), injected at most once per window; the synced `data` trait is small (a few points) and sent whole.

const KEY = "__memscope_bokehjs__";
const LOADING = "__memscope_fit_bokeh_loading__";

function bokehFor(version) {
  const B = globalThis.Bokeh;
  if (!B) return null;
  const b = B[version] || (B.version === version ? B : null);
  return b && b.Plotting ? b : null;
}

function inject(text) {
  return new Promise((resolve, reject) => {
    const url = URL.createObjectURL(new Blob([text], { type: "text/javascript" }));
    const s = document.createElement("script");
    s.src = url;
    s.async = false;
    s.dataset.memscope = "bokehjs";
    s.onload = () => { URL.revokeObjectURL(url); resolve(); };
    s.onerror = (e) => { URL.revokeObjectURL(url); reject(e); };
    document.head.appendChild(s);
  });
}

async function loadBokeh(model) {
  const version = model.get("_bokeh_version");
  const have = bokehFor(version);
  if (have) return have;
  const g = globalThis;
  if (!g[LOADING]) {
    g[LOADING] = (async () => {
      const reg = g[KEY];
      let src = reg && reg.sources && reg.sources[version];
      if (!src) {
        const ref = String(model.get("_bokehjs") || "");
        const loader = await model.widget_manager.get_model(ref.replace(/^IPY_MODEL_/, ""));
        src = { core: loader.get("core"), api: loader.get("api") };
      }
      if (!bokehFor(version)) { await inject(src.core); await inject(src.api); }
    })();
  }
  await g[LOADING];
  return bokehFor(version);
}

function columns(data) {
  const d = data || {};
  const ok = (d.probes || []).filter((p) => p.peak != null && !p.died && !p.anchor);
  const own = (d.probes || []).filter((p) => p.peak != null && !p.died && p.anchor);
  const dead = (d.probes || []).filter((p) => p.died && p.died !== "skipped");
  const top = Math.max(1, ...ok.map((p) => p.peak), d.forecast || 0, d.limit || 0);
  return {
    probes: { x: ok.map((p) => p.size), y: ok.map((p) => p.peak) },
    dead: { x: dead.map((p) => p.size), y: dead.map((p) => (d.limit || top)) },
    live: d.live ? { x: [d.live.size], y: [d.live.peak] } : { x: [], y: [] },
    line: d.line ? { x: d.line.x, y: d.line.y } : { x: [], y: [] },
    limit: d.limit && d.xmax ? { x: [0, d.xmax], y: [d.limit, d.limit] } : { x: [], y: [] },
    budget: d.budget && d.xmax ? { x: [0, d.xmax], y: [d.budget, d.budget] } : { x: [], y: [] },
    target: d.target ? { x: [d.target, d.target], y: [0, Math.max(top, d.forecast || 0) * 1.05] } : { x: [], y: [] },
    forecast: d.forecast != null ? { x: [d.target], y: [d.forecast] } : { x: [], y: [] },
    anchor: { x: own.map((p) => p.size), y: own.map((p) => p.peak) },
    anchorLine: d.anchor_line ? { x: d.anchor_line.x, y: d.anchor_line.y } : { x: [], y: [] },
  };
}

// The y range: up to the limit where it is near the probes; where it is far above them (a 24 GiB host and a
// 500 MiB training), the probes would be a flat line at 0: the range fits them and the title says where the limit is.
function yEnd(d) {
  const line = (d.line && d.line.y) || [];
  const top = Math.max(1, ...(d.probes || []).map((p) => p.peak || 0), (d.live && d.live.peak) || 0, d.forecast || 0, ...line);
  const far = d.limit && d.limit > 2.5 * top;
  return { end: far || !d.limit ? top * 1.25 : Math.max(top, d.limit) * 1.08, far };
}

function gib(b) {
  return b >= 1073741824 ? (b / 1073741824).toFixed(2) + " GiB" : (b / 1048576).toFixed(0) + " MiB";
}

const BYTES = `
const a = Math.abs(tick);
if (a >= 1073741824) return (tick / 1073741824).toFixed(2) + " GiB";
if (a >= 1048576) return (tick / 1048576).toFixed(0) + " MiB";
return (tick / 1024).toFixed(0) + " KiB";`;

async function render({ model, el }) {
  const box = document.createElement("div");
  el.appendChild(box);
  let B;
  try {
    B = await loadBokeh(model);
  } catch (e) {
    box.textContent = "memscope fit: BokehJS could not load: " + e;
    return;
  }
  if (!B) { box.textContent = "memscope fit: BokehJS is not available"; return; }
  const cols = columns(model.get("data"));
  const src = {};
  for (const k of Object.keys(cols)) src[k] = new B.ColumnDataSource({ data: cols[k] });
  const base = model.get("title") || "";
  const yr = new B.Range1d({ start: 0, end: yEnd(model.get("data") || {}).end });
  const fig = B.Plotting.figure({
    y_range: yr,
    height: model.get("height") || 300, sizing_mode: "stretch_width", title: model.get("title") || "",
    x_axis_label: "size", y_axis_label: "peak memory", tools: "pan,wheel_zoom,reset,save",
  });
  fig.yaxis.formatter = new B.CustomJSTickFormatter({ code: BYTES });
  const X = { field: "x" }, Y = { field: "y" };
  const drawn = [
    ["fitted line", fig.line(X, Y, { source: src.line, line_color: "#4c78a8", line_width: 2 })],
    ["probes (peak)", fig.scatter(X, Y, { source: src.probes, size: 10, color: "#4c78a8" })],
    ["probe running", fig.scatter(X, Y, { source: src.live, size: 12, fill_alpha: 0, line_color: "#f58518", line_width: 2 })],
    ["did not fit", fig.scatter(X, Y, { source: src.dead, size: 14, marker: "x", line_color: "#c62828", line_width: 3 })],
    ["limit", fig.line(X, Y, { source: src.limit, line_color: "#c62828", line_width: 2 })],
    ["limit less margin", fig.line(X, Y, { source: src.budget, line_color: "#c62828", line_dash: "dashed" })],
    ["target", fig.line(X, Y, { source: src.target, line_color: "#54a24b", line_dash: "dotdash" })],
    ["forecast", fig.scatter(X, Y, { source: src.forecast, size: 12, marker: "diamond", color: "#54a24b" })],
    ["probe, own allocator", fig.scatter(X, Y, { source: src.anchor, size: 12, marker: "square", fill_alpha: 0, line_color: "#b279a2", line_width: 2 })],
    ["its line to the forecast", fig.line(X, Y, { source: src.anchorLine, line_color: "#b279a2", line_dash: "dashed", line_width: 2 })],
  ];
  // Beside the plot, as the dashboard's chart has it: inside, it covered a probe or the forecast.
  fig.add_layout(new B.Legend({
    items: drawn.map(([label, r]) => new B.LegendItem({ label: { value: label }, renderers: [r] })),
    label_text_font_size: "11px", spacing: 0, glyph_height: 14, glyph_width: 18, padding: 6, border_line_alpha: 0,
  }), "right");
  await B.Plotting.show(fig, box);
  const update = () => {
    const d = model.get("data") || {};
    const c = columns(d);
    for (const k of Object.keys(c)) src[k].data = c[k];
    const y = yEnd(d);
    yr.end = y.end;
    fig.title.text = base + (y.far ? ` (limit ${gib(d.limit)}, less the margin ${gib(d.budget)}: above the chart)` : "");
  };
  update();
  model.on("change:data", update);
  return () => model.off("change:data", update);
}

export default { render };
