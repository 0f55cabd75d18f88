"""Bokeh formatters (JavaScript) shared by the run report and the snapshot page: bytes as KiB/MiB/GiB."""

# Bytes on the y axis, in one unit per axis (GiB once a tick reaches 1 GiB), trailing zeros dropped.
TICK_JS = """
const m = Math.max(...ticks.map(Math.abs));
const [f, u] = m >= 1073741824 ? [1073741824, "GiB"] : m >= 1048576 ? [1048576, "MiB"] : m >= 1024 ? [1024, "KiB"] : [1, "B"];
return (tick / f).toFixed(2).replace(/\\.?0+$/, "") + " " + u;
"""
HOVER_JS = """
const v = value, a = Math.abs(v);
if (a >= 1073741824) return (v / 1073741824).toFixed(2) + " GiB";
if (a >= 1048576) return (v / 1048576).toFixed(1) + " MiB";
if (a >= 1024) return (v / 1024).toFixed(0) + " KiB";
return v.toFixed(0) + " B";
"""
