"""Why every tensor went where it went: a table, a picture, stage dumps."""

from __future__ import annotations

import shutil
from pathlib import Path

import tvm

from .errors import TexscopeError
from .report import Report

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
        near = {tensor}
        for edge in report.edges:
            if tensor in (edge.source, edge.target):
                near |= {edge.source, edge.target}
        rows = [r for r in rows if r.name in near]
        if not rows:
            raise TexscopeError(f"no tensor named {tensor!r} in the report")
    producers = {e.target: e.kernel for e in report.edges}
    header = ("tensor", "producer", "shape", "bytes", "scope", "reason", "consumers")
    table = [header] + [
        (r.name, producers.get(r.name, r.origin), "x".join(map(str, r.shape)) if r.shape else "?",
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
    return "\n".join(lines)


def graph_svg(report: Report, path) -> Path:
    """Draw the dataflow with Graphviz: nodes coloured by scope, copies as red
    dashed edges, layout transforms as diamonds, functions as clusters."""
    if shutil.which("dot") is None:
        raise TexscopeError("Graphviz's dot is missing: apt-get install graphviz")
    import graphviz  # a maintained binding; only needed for pictures

    dot = graphviz.Digraph(graph_attr={"rankdir": "TB"}, node_attr={"style": "filled"})
    kernels = {e.target: e.kernel for e in report.edges}
    for function in sorted({r.function for r in report.tensors}):
        with dot.subgraph(name=f"cluster_{function}") as cluster:
            cluster.attr(label=function)
            for row in (r for r in report.tensors if r.function == function):
                shape = "diamond" if kernels.get(row.name, "").startswith("layout_transform") \
                    else ("box" if row.origin == "param" else "ellipse")
                cluster.node(f"{function}/{row.name}", f"{row.name}\n{row.scope}", shape=shape,
                             fillcolor=COLOURS.get(row.scope, "#ffffff"))
    for edge in report.edges:
        style = {"color": "red", "style": "dashed", "label": "copy"} if edge.copied else {}
        dot.edge(f"{edge.function}/{edge.source}", f"{edge.function}/{edge.target}", **style)
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
