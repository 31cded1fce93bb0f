"""Why every tensor went where it went: a table, a picture, stage dumps."""

from __future__ import annotations

import html
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
    return "\n".join(lines)


def _chain_heads(report: Report) -> dict:
    """Map each tensor to the first tensor of its chain: a run of tensors in one
    scope, each read only by the kernel writing the next (which may read other
    tensors too, such as weights)."""
    scope = {(r.function, r.index): r.scope for r in report.tensors}
    readers, writers = {}, {}
    for e in report.edges:
        readers.setdefault((e.function, e.source), set()).add((e.function, e.target))
        writers.setdefault((e.function, e.target), set()).add((e.function, e.source))
    head = {}
    for node in scope:  # tensors are in binding order, so a chain's head comes first
        source = next((s for s in sorted(writers.get(node, ()))
                       if len(readers[s]) == 1 and scope[s] == scope[node]), None)
        head[node] = node if source is None else head.get(source, source)
    return head


def graph_svg(report: Report, path, max_nodes: int = 150) -> Path:
    """Draw the dataflow with Graphviz: nodes coloured by scope, copies as red
    dashed edges, layout transforms as diamonds, functions as clusters.

    Above ``max_nodes`` tensors, chains of tensors in one scope collapse into
    one node each, so a long network stays legible.
    """
    if shutil.which("dot") is None:
        raise TexscopeError("Graphviz's dot is missing: apt-get install graphviz")
    import graphviz  # a maintained binding; only needed for pictures

    head = _chain_heads(report) if len(report.tensors) > max_nodes else \
        {(r.function, r.index): (r.function, r.index) for r in report.tensors}
    members: dict = {}
    for node, first in head.items():
        members.setdefault(first, []).append(node)
    rows = {(r.function, r.index): r for r in report.tensors}
    kernels = {(e.function, e.target): e.kernel for e in report.edges}
    dot = graphviz.Digraph(graph_attr={"rankdir": "TB"}, node_attr={"style": "filled"})
    for function in sorted({r.function for r in report.tensors}):
        with dot.subgraph(name=f"cluster_{function}") as cluster:
            cluster.attr(label=function)
            for first, group in members.items():
                if first[0] != function:
                    continue
                row = rows[first]
                label = f"{row.name}\n{row.scope}" if len(group) == 1 else \
                    f"{row.name} .. {rows[group[-1]].name}\n{len(group)} tensors, {row.scope}"
                shape = "diamond" if kernels.get(first, "").startswith("layout_transform") \
                    else ("box" if row.origin == "param" else "ellipse")
                cluster.node(f"{function}/{first[1]}", label, shape=shape,
                             fillcolor=COLOURS.get(row.scope, "#ffffff"))
    for edge in report.edges:
        source, target = head[(edge.function, edge.source)], head[(edge.function, edge.target)]
        if source == target:
            continue  # inside a collapsed chain
        style = {"color": "red", "style": "dashed", "label": "copy"} if edge.copied else {}
        dot.edge(f"{edge.function}/{source[1]}", f"{edge.function}/{target[1]}", **style)
    out = Path(path)
    out.write_bytes(dot.pipe(format="svg"))
    return out


def report_html(report: Report, path) -> Path:
    """One self-contained page: the summary, the table, and the graph when
    Graphviz is there to draw it."""
    picture = "<p>(install Graphviz to see the graph: apt-get install graphviz)</p>"
    if shutil.which("dot") is not None:
        svg = graph_svg(report, Path(path).with_suffix(".svg"))
        picture = svg.read_text().split("?>", 1)[-1]
    summary = "".join(f"<tr><th>{k.replace('_', ' ')}</th><td>{v}</td></tr>"
                      for k, v in report.summary().items())
    rows = "".join(
        f"<tr><td>{r.function}</td><td>{r.name}</td><td>{'x'.join(map(str, r.shape or ()))}</td>"
        f"<td>{r.nbytes}</td><td class='scope' style='background:{COLOURS.get(r.scope, '#fff')}'>"
        f"{r.scope}</td><td>{html.escape(r.reason)}</td></tr>"
        for r in report.tensors
    )
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>texscope report</title>
<style>body{{font-family:sans-serif;margin:2em}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:2px 6px;text-align:left;font-size:13px}}</style></head>
<body><h1>texscope report</h1>
<h2>Summary</h2><table id="summary">{summary}</table>
<h2>Graph</h2><div id="graph">{picture}</div>
<h2>Tensors</h2><table id="tensors"><tr><th>function</th><th>tensor</th><th>shape</th>
<th>bytes</th><th>scope</th><th>reason</th></tr>{rows}</table></body></html>"""
    out = Path(path)
    out.write_text(page)
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
