"""Why every tensor went where it went: a table, a picture, stage dumps.

The HTML report page that shows them is :mod:`texscope.diagnostics.report_page`.
"""

from __future__ import annotations

import html
import shutil
from pathlib import Path

import tvm

from ..errors import TexscopeError
from .report import Report
from ..knowledge.targets import BUFFER_SCOPE, describe_flavour

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
        near = _focus(report, tensor)
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
        return "the graphviz Python package (pip install graphviz)"
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
                    else ("box" if row.origin in ("param", "weight") else "ellipse")
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
