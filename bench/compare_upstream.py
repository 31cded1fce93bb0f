"""texscope against TVM's C++ AnnotateCustomMemoryScope, same input, one process.

Both annotate the same stage-1 output (upstream's own texture prefix of the
Adreno legalize passes), then the same usual legalize/fuse/fold passes run.
Printed per network, for upstream, texscope ``local`` and texscope ``optimal``:

- copies and KiB copied: ``to_vdevice`` left in main after those passes;
- cost: ``texscope.plan_cost`` of the annotated module (16-byte units: bytes
  copied plus a launch price per copy, minus what texture reads save);
- conv tex: conv2d data inputs read from a texture;
- broken: ``texscope.diagnostics.verify.check_invariants`` violations of the annotated
  module (a 1-D "texture", a kernel writing a texture its schedule cannot
  write...): a plan with violations is cheap on paper only;
- time: annotation alone, median of 7 after a warm-up (the tools' runs
  alternating; garbage collection off while timing, as timeit does), and its
  ratio to upstream's.

Then, for the smaller graphs, the optimal planner's plan against exhaustive
search over every assignment in the planner's own cost model
(``texscope.diagnostics.exhaustive.exhaustive``: it checks the min-cut
encoding of that model; the tests also check the planner against an
independent oracle, ``realized_optimum``).

A plot of annotation time against graph size is saved next to this file
(``compare_upstream.png``) when matplotlib is installed.

Run: ``python bench/compare_upstream.py [network ...]``
"""

from __future__ import annotations

import gc
import statistics
import time
from pathlib import Path

import tvm
from tvm import relax

import texscope
from texscope.backend import upstream
from texscope.models import zoo
from _cli import Recorded, zoo_networks
from texscope.diagnostics.exhaustive import exhaustive, plan_units
from texscope.diagnostics.verify import check_invariants

TARGET = tvm.target.Target("qcom/adreno-opencl-texture")
REPEAT = 7
# Graphs small enough to try exhaustive search on (free choices are checked too).
EXHAUSTIVE_CALLS = 64
EXHAUSTIVE_FREE = 20  # 2**20 assignments: about half a minute in Python
DEFAULT_NETWORKS = ("resnet", "mobilenet_v2", "unet", "inception", "chain64", "chain256",
                    "chain1024")


def main_calls(mod):
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            if isinstance(binding.value, relax.Call) and isinstance(binding.value.op, tvm.ir.Op):
                yield binding.value


def is_texture(expr) -> bool:
    ty = expr.ty
    return isinstance(ty, relax.TensorType) and ty.vdevice is not None and \
        "texture" in str(ty.vdevice.memory_scope)


def _timed(annotate, stage1):
    # As timeit does: no garbage collection inside the timed region.
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        annotated = annotate(stage1)
        return time.perf_counter() - start, annotated
    finally:
        gc.enable()


def measure(tools, stage1):
    """Each tool's figures; the tools' runs alternate, so that load on the
    machine falls on all alike."""
    for annotate in tools.values():
        annotate(stage1)  # warm-up: caches, lazily registered functions
    times = {tool: [] for tool in tools}
    last = {}
    for _ in range(REPEAT):
        for tool, annotate in tools.items():
            seconds, last[tool] = _timed(annotate, stage1)
            times[tool].append(seconds)
    return {tool: _figures(last[tool], statistics.median(times[tool])) for tool in tools}


def _figures(annotated, seconds):
    conv_tex = sum(
        is_texture(call.args[0]) for call in main_calls(annotated) if call.op.name == "relax.nn.conv2d"
    )
    plan = texscope.plan_cost(annotated, TARGET)
    broken = len(check_invariants(annotated, TARGET))
    with TARGET:
        lowered = upstream.after_annotation()(annotated)
    left = texscope.plan_cost(lowered, TARGET)
    return {"copies": left.copies, "kib": left.copy_bytes / 1024, "cost": plan.units,
            "conv_tex": conv_tex, "broken": broken, "seconds": seconds}


COLUMNS = """\
copies, KiB: copies (to_vdevice) left in main after legalize, fuse and fold, and the bytes they move
cost: texscope.plan_cost of the annotated module, in 16-byte units: bytes copied, plus a launch
      price per copy, minus what texture reads save (lower is better; it can be negative)
conv tex: conv2d data inputs read from a texture
broken: texscope.diagnostics.verify.check_invariants violations of the annotated module (say, a 1-D
        "texture", or a kernel writing a texture its schedule cannot write); anything but 0
        means the plan is cheap on paper only and would not build or run right
ms, ratio: annotation time (median of 7) and its ratio to upstream's
"""


def run(names):
    tools = {
        "upstream": upstream.annotate(TARGET),
        "local": texscope.AnnotateTextureScope(TARGET, policy="local"),
        "optimal": texscope.AnnotateTextureScope(TARGET, policy="optimal"),
    }
    header = (f"{'network':<12} {'calls':>6} {'tool':<9} {'copies':>6} {'KiB':>8} {'cost':>9} "
              f"{'conv tex':>8} {'broken':>6} {'ms':>8} {'ratio':>6}")
    print(COLUMNS)
    print(header)
    print("-" * len(header))
    sizes, times, names_used, problems = [], {tool: [] for tool in tools}, [], []
    for name in names:
        mod = zoo.NETWORKS[name]()
        with TARGET:
            stage1 = upstream.stage1()(mod)
        try:
            results = measure(tools, stage1)
        except tvm.error.InternalError:
            # Upstream's stage 1 packs depthwise convs, which TVM's Adreno conv
            # legalization then divides by zero on: use texscope's stage 1.
            stage1 = texscope.ConvertToPackedLayout(TARGET)(mod)
            name += "*"
            results = measure(tools, stage1)
        calls = sum(1 for _ in main_calls(stage1))
        if calls <= EXHAUSTIVE_CALLS:
            problems.append((name, texscope.collect_consumer(
                stage1, "main", texscope.texture_target(TARGET))))
        names_used.append(name)
        base = results["upstream"]["seconds"]
        for tool, r in results.items():
            print(f"{name:<12} {calls:>6} {tool:<9} {r['copies']:>6} {r['kib']:>8.1f} "
                  f"{r['cost']:>9} {r['conv_tex']:>8} {r['broken']:>6} {r['seconds'] * 1e3:>8.1f} "
                  f"{r['seconds'] / base:>6.2f}")
            times[tool].append(r["seconds"])
        sizes.append(calls)
    if any(name.endswith("*") for name in names_used):
        print("\n*: upstream's stage 1 crashes the build on depthwise convs; both annotate "
              "texscope's stage-1 output instead.")
    print("\nThe planning problem itself (texscope's cost units, stage 3 alone): the optimal "
          "planner's plan against exhaustive search where at most "
          f"{EXHAUSTIVE_FREE} choices are free.")
    for name, consumers in problems:
        best = exhaustive(consumers, EXHAUSTIVE_FREE)
        planned = plan_units(texscope.collect_producer(consumers, "optimal"))
        verdict = "too large to enumerate" if best is None else \
            f"exhaustive {best}: {'equal' if best == planned else 'DIFFERENT'}"
        print(f"  {name:<12} optimal {planned:>8}  {verdict}")
    _plot(sizes, times)


def _plot(sizes, times):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(pip install matplotlib for the plot)")
        return
    order = sorted(range(len(sizes)), key=sizes.__getitem__)
    fig, ax = plt.subplots(figsize=(6, 4))
    for tool, values in times.items():
        ax.plot([sizes[i] for i in order], [values[i] * 1e3 for i in order], marker="o", label=tool)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("calls in main after stage 1")
    ax.set_ylabel("annotation time (ms)")
    ax.set_title("Scope annotation time against graph size")
    ax.legend()
    out = Path(__file__).with_suffix(".png")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"plot: {out}")


if __name__ == "__main__":
    ARGS = zoo_networks(__doc__, DEFAULT_NETWORKS)
    with Recorded(ARGS.markdown, "compare_upstream.py"):
        run(ARGS.networks)
