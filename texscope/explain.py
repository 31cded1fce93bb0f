"""Why every tensor went where it went: a table, a picture, stage dumps."""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

import tvm

from .errors import TexscopeError
from .report import Report
from .targets import BUFFER_SCOPE, describe_flavour

# Fill colours: texture flavours in greens, buffers grey.
COLOURS = {
    "global.texture-weight": "#74c476",
    "global.texture-nhwc": "#a1d99b",
    "global.texture": "#c7e9c0",
    "global": "#d9d9d9",
}


def explain(report: Report, tensor: str | None = None) -> str:
    """A table per tensor (and its neighbours, with ``tensor``), the copies, totals."""
    rows = list(report.tensors)
    if tensor is not None:
        chosen = {(r.function, r.index) for r in rows if r.name == tensor}
        if not chosen:
            raise TexscopeError(f"no tensor named {tensor!r} in the report")
        near = set(chosen)
        for e in report.edges:
            if (e.function, e.source) in chosen or (e.function, e.target) in chosen:
                near |= {(e.function, e.source), (e.function, e.target)}
        rows = [r for r in rows if (r.function, r.index) in near]
    producers = {(e.function, e.target): e.kernel for e in report.edges}
    header = ("tensor", "producer", "shape", "bytes", "scope", "reason", "consumers")
    table = [header] + [
        (r.name, producers.get((r.function, r.index), r.origin), "x".join(map(str, r.shape)) if r.shape else "?",
         str(r.nbytes), r.scope, r.reason, "; ".join(r.consumers))
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(5)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row[:5], widths)) + "  " + "  |  ".join(row[5:])
             for row in table]
    lines.append("")
    copies = [c for c in report.copies if tensor is None or c.tensor in {r.name for r in rows}]
    lines.append(f"copies: {len(copies)}" + "".join(
        f"\n  {c.tensor}: {c.source} -> {c.destination}, {c.nbytes} bytes, for {', '.join(c.readers)}"
        for c in copies))
    lines.append("tensors per scope: " + ", ".join(f"{s} {n}" for s, n in report.counts().items()))
    lines += [f"  {describe_flavour(s)}" for s in report.counts() if s in COLOURS and s != BUFFER_SCOPE]
    return "\n".join(lines)


def _chain_heads(report: Report, nodes) -> dict:
    """Map each of ``nodes`` to the first tensor of its chain: a run of tensors
    in one scope, each read only by the kernel writing the next (which may
    read other tensors too, such as weights)."""
    scope = {(r.function, r.index): r.scope for r in report.tensors}
    readers, writers = {}, {}
    for e in report.edges:
        source, target = (e.function, e.source), (e.function, e.target)
        if source in nodes and target in nodes:
            readers.setdefault(source, set()).add(target)
            writers.setdefault(target, set()).add(source)
    head = {}
    for node in sorted(nodes):  # tensors are in binding order, so a chain's head comes first
        source = next((s for s in sorted(writers.get(node, ()))
                       if len(readers[s]) == 1 and scope[s] == scope[node]), None)
        head[node] = node if source is None else head.get(source, source)
    return head


def parameter_side(report: Report) -> set:
    """Tensors computed from parameters and constants alone (weights,
    batch-norm vectors and what packs them), as (function, index): all that
    the function's first parameter, the model's input, does not reach.  A
    model with several inputs has its other inputs counted here too."""
    reached = {(r.function, r.index) for r in report.tensors if r.index == 0}
    for e in report.edges:  # edges are in binding order: one pass reaches all
        if (e.function, e.source) in reached:
            reached.add((e.function, e.target))
    return {(r.function, r.index) for r in report.tensors} - reached


def graphviz_missing() -> str | None:
    """What is missing to draw graphs (Graphviz's dot, the graphviz package), or None."""
    if shutil.which("dot") is None:
        return "Graphviz's dot program (apt-get install graphviz)"
    try:
        import graphviz  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    except ImportError:
        return "the graphviz Python package (pip install 'texscope[explain]')"
    return None


def require_graphviz() -> None:
    """Raise a TexscopeError unless graphs can be drawn."""
    missing = graphviz_missing()
    if missing:
        raise TexscopeError(f"drawing the graph needs {missing}")


def _focus(report: Report, tensor: str) -> set:
    """The tensors named ``tensor``, the tensors its producer reads and those
    its readers write."""
    chosen = {(r.function, r.index) for r in report.tensors if r.name == tensor}
    if not chosen:
        raise TexscopeError(f"no tensor named {tensor!r} in the report")
    near = set(chosen)
    for e in report.edges:
        if (e.function, e.source) in chosen or (e.function, e.target) in chosen:
            near |= {(e.function, e.source), (e.function, e.target)}
    return near


def _short_scope(scope: str) -> str:
    return "buffer" if scope == BUFFER_SCOPE else scope.removeprefix("global.")


def _label(title: str, subtitle: str, marks: list) -> str:
    """A Graphviz HTML label: the tensor, its kernel and scope, then one small
    square per parameter-side tensor the kernel reads, in that tensor's colour."""
    span = max(1, len(marks))
    cells = "".join(
        f'<TD BGCOLOR="{COLOURS.get(row.scope, "#ffffff")}" BORDER="1" WIDTH="9" HEIGHT="9" '
        f'FIXEDSIZE="TRUE" TOOLTIP="{html.escape(f"{row.name}: {row.scope}")}"></TD>'
        for row in marks)
    return (f'<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="2" CELLPADDING="0">'
            f'<TR><TD COLSPAN="{span}">{html.escape(title)}</TD></TR>'
            f'<TR><TD COLSPAN="{span}"><FONT POINT-SIZE="9">{html.escape(subtitle)}</FONT></TD></TR>'
            + (f"<TR>{cells}</TR>" if marks else "") + "</TABLE>>")


LEGEND = ("green: texture (darker: texture-weight, then texture-nhwc, texture); grey: buffer; "
          "box: model input; diamond: layout transform; small squares: parameters the kernel "
          "reads, in their colour; red dashed: copy")


def graph_svg(report: Report, path, max_nodes: int = 150, focus: str | None = None) -> Path:
    """Draw the dataflow with Graphviz: nodes coloured by scope, copies as red
    dashed edges, layout transforms as diamonds, functions as clusters.

    Parameters and what is computed from them alone (:func:`parameter_side`)
    are small squares on the node of the kernel that reads them, unless a copy
    of theirs must be seen.  Above ``max_nodes`` tensors, chains of tensors in
    one scope collapse into one node each.  With ``focus``, only that tensor,
    the tensors its producer reads and those its readers write are drawn.
    """
    require_graphviz()
    import graphviz  # a maintained binding; only needed for pictures

    rows = {(r.function, r.index): r for r in report.tensors}
    kernels = {(e.function, e.target): e.kernel for e in report.edges}
    marks: dict = {}
    if focus is not None:
        drawn = _focus(report, focus)
    else:
        side = parameter_side(report)
        copied = {(e.function, e.source) for e in report.edges if e.copied}
        drawn = set(rows) - (side - copied)
        for e in report.edges:
            source, target = (e.function, e.source), (e.function, e.target)
            if source not in drawn and target in drawn:
                marks.setdefault(target, []).append(rows[source])
    head = _chain_heads(report, drawn) if len(drawn) > max_nodes else {n: n for n in drawn}
    members: dict = {}
    for node, first in sorted(head.items()):
        members.setdefault(first, []).append(node)
    font = {"fontname": "sans-serif", "fontsize": "10"}
    dot = graphviz.Digraph(graph_attr={"rankdir": "TB", "label": LEGEND, **font},
                           node_attr={"style": "filled", **font, "fontsize": "11", "margin": "0.05"},
                           edge_attr=font)
    for function in sorted({r.function for r in report.tensors}):
        with dot.subgraph(name=f"cluster_{function}") as cluster:
            cluster.attr(label=function)
            for first, group in members.items():
                if first[0] != function:
                    continue
                row = rows[first]
                kernel = kernels.get(first, row.origin)
                if len(group) == 1:
                    title, subtitle = row.name, f"{kernel} · {_short_scope(row.scope)}"
                else:
                    title = f"{row.name} .. {rows[group[-1]].name}"
                    subtitle = f"{len(group)} tensors, {row.scope}"
                shape = "diamond" if kernel.startswith("layout_transform") \
                    else ("box" if row.origin == "param" else "ellipse")
                group_marks = [m for member in group for m in marks.get(member, [])]
                cluster.node(f"{function}/{first[1]}", _label(title, subtitle, group_marks),
                             shape=shape, fillcolor=COLOURS.get(row.scope, "#ffffff"),
                             tooltip=f"{title}: {row.scope}")
    for edge in report.edges:
        source, target = (edge.function, edge.source), (edge.function, edge.target)
        if source not in head or target not in head or head[source] == head[target]:
            continue  # a parameter's mark, outside the focus, or inside a collapsed chain
        style = {"color": "red", "style": "dashed", "penwidth": "3", "label": "copy"} \
            if edge.copied else {}
        dot.edge(f"{edge.function}/{head[source][1]}", f"{edge.function}/{head[target][1]}", **style)
    out = Path(path)
    out.write_bytes(dot.pipe(format="svg"))
    return out


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
<html><head><meta charset="utf-8"><title>texscope report</title>
<style>body{{font-family:sans-serif;margin:1em 2em}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:2px 6px;text-align:left;font-size:13px}}
h1{{font-size:1.4em;margin:0.2em 0}} #figures{{margin:0.2em 0 0.5em}}
#graph{{height:calc(100vh - 9em);min-height:20em;border:1px solid #ccc;position:relative}}
#graph svg{{width:100%;height:100%;cursor:grab}}
#zoom{{position:absolute;top:4px;right:4px}} #zoom button{{font-size:14px;min-width:2.2em}}
#legend{{font-size:13px}} .swatch{{display:inline-block;width:1em;height:1em;border:1px solid #888;
margin-right:0.4em;vertical-align:middle}}</style></head>
<body><h1>texscope report: {html.escape(str(report.target))}</h1>
<p id="figures">{figures}. Scroll on the graph to zoom, drag to pan; the legend is below it.</p>
<div id="graph"><div id="zoom"><button id="zoom-in">+</button><button id="zoom-out">&minus;</button>
<button id="zoom-fit">fit</button></div>{picture}</div>
<h2>Legend</h2>{_legend(report)}
<h2>Summary</h2><table id="summary">{table}</table>
<h2>Tensors</h2><table id="tensors"><tr><th>function</th><th>tensor</th><th>shape</th>
<th>bytes</th><th>scope</th><th>reason</th></tr>{rows}</table>{_ZOOM_AND_PAN}</body></html>"""
    out.write_text(page)
    return written


@tvm.ir.instrument.pass_instrument
class DumpStages:
    """Write the module's TVMScript after each texscope stage into ``directory``.

    Use as ``with tvm.transform.PassContext(instruments=[DumpStages("dump")]):``.
    """

    def __init__(self, directory):
        self.directory = Path(directory)
        self.count = 0

    def run_after_pass(self, mod, info):
        if info.name.startswith("texscope."):
            self.directory.mkdir(parents=True, exist_ok=True)
            self.count += 1
            name = f"{self.count:02d}_{info.name.removeprefix('texscope.')}.py"
            (self.directory / name).write_text(mod.script(show_meta=False))
