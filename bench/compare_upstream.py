"""texscope against TVM's C++ AnnotateCustomMemoryScope, same input, one process.

Both annotate the same stage-1 output (upstream's own texture prefix of the
Adreno legalize passes), then both outputs go through the same usual
legalize/fuse passes.  Printed per network:

- copies: ``to_vdevice`` calls left in main after those passes;
- tex args: call_tir tensor arguments read from a texture, after fusion;
- conv tex: conv2d data inputs read from a texture, right after annotation;
- time: annotation alone, median of 3, and texscope's time over upstream's.

Run: ``python bench/compare_upstream.py [network ...]``
"""

from __future__ import annotations

import statistics
import sys
import time

import tvm
from tvm import relax

import texscope
from texscope import upstream, zoo

TARGET = tvm.target.Target("qcom/adreno-opencl-texture")
DEFAULT_NETWORKS = ("resnet", "chain64", "chain256")


def main_calls(mod):
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            if isinstance(binding.value, relax.Call) and isinstance(binding.value.op, tvm.ir.Op):
                yield binding.value


def is_texture(expr) -> bool:
    ty = expr.ty
    return isinstance(ty, relax.TensorType) and ty.vdevice is not None and \
        "texture" in str(ty.vdevice.memory_scope)


def measure(annotate, stage1):
    times = []
    for _ in range(3):
        start = time.perf_counter()
        annotated = annotate(stage1)
        times.append(time.perf_counter() - start)
    conv_tex = sum(
        is_texture(call.args[0]) for call in main_calls(annotated) if call.op.name == "relax.nn.conv2d"
    )
    lowered = upstream.after_annotation()(annotated)
    copies = sum(call.op.name == "relax.to_vdevice" for call in main_calls(lowered))
    tex_args = sum(
        is_texture(arg)
        for call in main_calls(lowered) if call.op.name == "relax.call_tir"
        for arg in call.args[1].fields
    )
    return copies, tex_args, conv_tex, statistics.median(times)


def run(names):
    theirs = upstream.annotate(TARGET)
    ours = texscope.AnnotateTextureScope(TARGET)
    header = (f"{'network':<10} {'convs':>5} | {'copies':>13} | {'tex args':>13} | "
              f"{'conv tex':>13} | {'upstream ms':>11} {'texscope ms':>11} {'ratio':>6}")
    print(header)
    print("-" * len(header))
    for name in names:
        with TARGET:
            stage1 = upstream.stage1()(zoo.NETWORKS[name]())
            convs = sum(c.op.name == "relax.nn.conv2d" for c in main_calls(stage1))
            up = measure(theirs, stage1)
            ts = measure(ours, stage1)
        print(f"{name:<10} {convs:>5} | {up[0]:>5} -> {ts[0]:>5} | {up[1]:>5} -> {ts[1]:>5} | "
              f"{up[2]:>5} -> {ts[2]:>5} | {up[3] * 1e3:>11.1f} {ts[3] * 1e3:>11.1f} "
              f"{ts[3] / up[3]:>6.2f}")
    print("\ncolumns: upstream -> texscope; copies = to_vdevice left in main after "
          "legalize/fuse/fold; time = annotation alone, median of 3")


if __name__ == "__main__":
    run(sys.argv[1:] or DEFAULT_NETWORKS)
