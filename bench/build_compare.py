"""Whole builds for Adreno OpenCL: texscope against upstream's pipeline.

Upstream is ``relax.backend.adreno.get_default_pipeline`` given the same TIR
pipeline fix (``tir_pipeline="texscope_adreno"``), so both emit image kernels.
Printed per network: build time (median of 7 after a warm-up, the two
tools' builds alternating, garbage collection off while timing), kernels, kernels taking images,
``to_vdevice`` copies left after fusion, whether PoCL compiles the kernels.

Run: ``python bench/build_compare.py [network ...]``
"""

from __future__ import annotations

import gc
import statistics
import time

import tvm

import texscope
from texscope import opencl
from texscope.models import zoo
from _cli import Recorded, zoo_networks
from texscope.backend import upstream
from texscope.opencl.source import kernel_signatures

TARGET = tvm.target.Target("qcom/adreno-opencl-texture", host="llvm")
REPEAT = 7
DEFAULT = ("resnet", "mobilenet_v2", "unet", "inception", "chain64")


def upstream_build(mod):
    """Upstream's pipeline; copies counted before dataflow lowering."""
    source, before_lowering = upstream.adreno_build(mod, TARGET)
    return source, texscope.plan_cost(before_lowering, TARGET).copies


def texscope_build(mod):
    result = texscope.build(mod, TARGET)
    return result.opencl_source, result.report.build["copies_left"]


def _timed(build_fn, mod):
    # As timeit does: no garbage collection inside the timed region.
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        source, copies = build_fn(mod)
        return time.perf_counter() - start, source, copies
    finally:
        gc.enable()


def measure(tools, name):
    """Each tool's figures on one network, or the first line of its crash.

    The tools' builds alternate, so that load on the machine during the run
    falls on both alike.
    """
    mod = zoo.NETWORKS[name]()
    results, times = {}, {tool: [] for tool in tools}
    for tool, build_fn in tools.items():
        try:
            build_fn(mod)  # warm-up: lazily registered functions, caches
        except Exception as err:  # upstream crashes on some networks: report, go on
            results[tool] = f"crash: {type(err).__name__}: {str(err).splitlines()[0][:50]}"
    running = {tool: fn for tool, fn in tools.items() if tool not in results}
    last = {}
    for _ in range(REPEAT):
        for tool, build_fn in running.items():
            seconds, source, copies = _timed(build_fn, mod)
            times[tool].append(seconds)
            last[tool] = (source, copies)
    for tool, (source, copies) in last.items():
        kernels = kernel_signatures(source)
        try:
            opencl.compile_source(source)
            pocl = "yes"
        except Exception:  # pyopencl raises its own error types
            pocl = "NO"
        images = sum("image2d" in p for p in kernels.values())
        results[tool] = (statistics.median(times[tool]), len(kernels), images, copies, pocl)
    return results


def run(names):
    print(f"{'network':<13} {'tool':<9} {'build ms':>9} {'kernels':>8} {'w/ images':>9} "
          f"{'copies':>7} {'PoCL':>5}")
    tools = {"upstream": upstream_build, "texscope": texscope_build}
    for name in names:
        results = measure(tools, name)
        for tool in tools:
            result = results[tool]
            if isinstance(result, str):
                print(f"{name:<13} {tool:<9} {result}")
            else:
                t, kernels, images, copies, pocl = result
                print(f"{name:<13} {tool:<9} {t * 1e3:>9.0f} {kernels:>8} {images:>9} "
                      f"{copies:>7} {pocl:>5}")


if __name__ == "__main__":
    ARGS = zoo_networks(__doc__, DEFAULT)
    with Recorded(ARGS.markdown, "build_compare.py"):
        run(ARGS.networks)
