"""report.html: key figures, the graph fitted to the window (zoom and pan),
its legend, the summary and the table, in one self-contained page."""

from __future__ import annotations

import html
import re
from pathlib import Path

from .explain import COLOURS, graph_svg, graphviz_missing
from .report import Report
from ..knowledge.targets import BUFFER_SCOPE, describe_flavour

# Fits the picture to its box, zooms at the pointer on the wheel or the
# buttons, pans when dragged.
_ZOOM_AND_PAN = """
<script>
(() => {
  const svg = document.querySelector('#graph svg');
  if (!svg) return;
  const full = svg.viewBox.baseVal;
  const home = [full.x, full.y, full.width, full.height];
  let view = home.slice();
  const show = () => svg.setAttribute('viewBox', view.join(' '));
  const scale = () => Math.max(view[2] / svg.clientWidth, view[3] / svg.clientHeight);
  const zoom = (factor, px, py) => {
    const s = scale(), x = view[0] + (px - svg.clientWidth / 2) * s + view[2] / 2,
          y = view[1] + (py - svg.clientHeight / 2) * s + view[3] / 2;
    view = [x - (x - view[0]) * factor, y - (y - view[1]) * factor, view[2] * factor, view[3] * factor];
    show();
  };
  svg.addEventListener('wheel', e => {
    e.preventDefault();
    const r = svg.getBoundingClientRect();
    zoom(e.deltaY > 0 ? 1.2 : 1 / 1.2, e.clientX - r.left, e.clientY - r.top);
  }, {passive: false});
  let drag = null;
  svg.addEventListener('pointerdown', e => { drag = [e.clientX, e.clientY]; svg.setPointerCapture(e.pointerId); });
  svg.addEventListener('pointermove', e => {
    if (!drag) return;
    const s = scale();
    view[0] -= (e.clientX - drag[0]) * s; view[1] -= (e.clientY - drag[1]) * s;
    drag = [e.clientX, e.clientY]; show();
  });
  svg.addEventListener('pointerup', () => { drag = null; });
  const centre = f => zoom(f, svg.clientWidth / 2, svg.clientHeight / 2);
  document.getElementById('zoom-in').onclick = () => centre(1 / 1.5);
  document.getElementById('zoom-out').onclick = () => centre(1.5);
  document.getElementById('zoom-fit').onclick = () => { view = home.slice(); show(); };
})();
</script>"""

_SWATCH = "<span class='swatch' style='background:{}'></span>"


def _legend(report: Report) -> str:
    scopes = [s for s in COLOURS if s in report.counts()] or [BUFFER_SCOPE]
    flavours = "".join(f"<li>{_SWATCH.format(COLOURS[s])}<code>{html.escape(describe_flavour(s))}</code></li>"
                       for s in scopes)
    return (f"<ul id='legend'>{flavours}"
            "<li>box: a model input; ellipse: a tensor a kernel writes; diamond: a layout "
            "transform (packing into or out of [d0, d1, d2, d3, 4])</li>"
            "<li>small squares on a node: the parameters (weights, batch-norm vectors, and "
            "what packs them) its kernel reads, coloured by their storage; hover for names</li>"
            "<li><span style='color:red'>red dashed edge</span>: a copy between a texture and a "
            "buffer; 'a .. b, N tensors': a chain of N tensors in one storage</li></ul>")


def report_html(report: Report, path) -> list[Path]:
    """One self-contained page: key figures, the graph (fitted to the window,
    with zoom and pan, when Graphviz can draw it) and its legend, the summary,
    the table.  Returns the files written (the page, and the SVG beside it)."""
    out = Path(path)
    written = [out]
    missing = graphviz_missing()
    if missing:
        picture = f"<p>(the graph needs {html.escape(missing, quote=False)})</p>"
    else:
        svg = graph_svg(report, out.with_suffix(".svg"))
        written.append(svg)
        picture = svg.read_text().split("?>", 1)[-1]
        # Drop the size Graphviz gives in points so the picture fits its box.
        picture = re.sub(r'<svg width="[^"]*" height="[^"]*"', '<svg', picture, count=1)
    summary = report.summary()
    figures = (f"{summary['tensors']} tensors: {summary['in_texture']} in texture, "
               f"{summary['in_buffer']} in buffers; copies planned: {summary['planned_copies']}")
    table = "".join(f"<tr><th>{k.replace('_', ' ')}</th><td>{v}</td></tr>" for k, v in summary.items())
    rows = "".join(
        f"<tr><td>{r.function}</td><td>{html.escape(r.name)}</td><td>{'x'.join(map(str, r.shape or ()))}</td>"
        f"<td>{r.nbytes}</td><td class='scope' style='background:{COLOURS.get(r.scope, '#fff')}'>"
        f"{r.scope}</td><td>{html.escape(r.reason)}</td></tr>"
        for r in report.tensors
    )
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>texscope report: {html.escape(report.title)}</title>
<style>body{{font-family:sans-serif;margin:1em 2em}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:2px 6px;text-align:left;font-size:13px}}
h1{{font-size:1.4em;margin:0.2em 0}} #figures{{margin:0.2em 0 0.5em}}
#graph{{height:calc(100vh - 9em);min-height:20em;border:1px solid #ccc;position:relative}}
#graph svg{{width:100%;height:100%;cursor:grab}}
#zoom{{position:absolute;top:4px;right:4px}} #zoom button{{font-size:14px;min-width:2.2em}}
#legend{{font-size:13px}} .swatch{{display:inline-block;width:1em;height:1em;border:1px solid #888;
margin-right:0.4em;vertical-align:middle}}</style></head>
<body><h1>texscope report: {html.escape(report.title)}</h1>
<p id="figures">{figures}. Scroll on the graph to zoom, drag to pan; the legend is below it.</p>
<div id="graph"><div id="zoom"><button id="zoom-in">+</button><button id="zoom-out">&minus;</button>
<button id="zoom-fit">fit</button></div>{picture}</div>
<h2>Legend</h2>{_legend(report)}
<h2>Summary</h2><table id="summary">{table}</table>
<h2>Tensors</h2><table id="tensors"><tr><th>function</th><th>tensor</th><th>shape</th>
<th>bytes</th><th>scope</th><th>reason</th></tr>{rows}</table>{_ZOOM_AND_PAN}</body></html>"""
    out.write_text(page)
    return written
