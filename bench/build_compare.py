"""Whole builds for Adreno OpenCL: texscope against upstream's pipeline.

Upstream is ``relax.backend.adreno.get_default_pipeline`` given the same TIR
pipeline fix (``tir_pipeline="texscope_adreno"``), so both emit image kernels.
Printed per network: build time (median of 5 after a warm-up, garbage
collection off while timing), kernels, kernels taking images,
``to_vdevice`` copies left after fusion, whether PoCL compiles the kernels.

Run: ``python bench/build_compare.py [network ...]``
"""

from __future__ import annotations

import gc
import statistics
import sys
import time

import tvm
from tvm import relax

import texscope
from texscope import opencl, zoo
from texscope.build import TIR_PIPELINE, _device_source, kernel_signatures

TARGET = tvm.target.Target("qcom/adreno-opencl-texture", host="llvm")
REPEAT = 5
DEFAULT = ("resnet", "mobilenet_v2", "unet", "inception", "chain64")


def upstream_build(mod):
    """Upstream's pipeline, capturing the module before dataflow lowering to count copies."""
    captured = {}

    @tvm.transform.module_pass(opt_level=0)
    def capture(m, _ctx):
        captured["mod"] = m
        return m

    @tvm.transform.module_pass(opt_level=0)
    def pipeline(m, _ctx):
        with TARGET:  # upstream's legalize_passes reads Target.current() when built
            passes = (relax.backend.adreno.library_dispatch_passes(TARGET)
                      + relax.backend.adreno.legalize_passes(TARGET) + [capture]
                      + relax.backend.adreno.dataflow_lower_passes(TARGET)
                      + relax.backend.adreno.finalize_passes(TARGET))
            return tvm.transform.Sequential(passes)(m)

    executable = tvm.compile(mod, target=TARGET, relax_pipeline=pipeline, tir_pipeline=TIR_PIPELINE)
    return _device_source(executable), count_copies(captured["mod"])


def count_copies(mod):
    return sum(
        1 for block in mod["main"].body.blocks for b in block.bindings
        if isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.Op)
        and b.value.op.name == "relax.to_vdevice"
    )


def texscope_build(mod):
    result = texscope.build(mod, TARGET)
    return result.opencl_source, result.report.build["copies_left"]


def measure(build_fn, name):
    mod = zoo.NETWORKS[name]()
    times = []
    try:
        build_fn(mod)  # warm-up: lazily registered functions, caches
        for _ in range(REPEAT):
            # As timeit does: no garbage collection inside the timed region.
            gc.collect()
            gc.disable()
            try:
                start = time.perf_counter()
                source, copies = build_fn(mod)
                times.append(time.perf_counter() - start)
            finally:
                gc.enable()
    except Exception as err:  # upstream crashes on some networks: report, go on
        return f"crash: {type(err).__name__}: {str(err).splitlines()[0][:50]}"
    kernels = kernel_signatures(source)
    try:
        opencl.compile_source(source)
        pocl = "yes"
    except Exception:  # pyopencl raises its own error types
        pocl = "NO"
    images = sum("image2d" in p for p in kernels.values())
    return (statistics.median(times), len(kernels), images, copies, pocl)


def run(names):
    print(f"{'network':<13} {'tool':<9} {'build ms':>9} {'kernels':>8} {'w/ images':>9} "
          f"{'copies':>7} {'PoCL':>5}")
    for name in names:
        for tool, fn in (("upstream", upstream_build), ("texscope", texscope_build)):
            result = measure(fn, name)
            if isinstance(result, str):
                print(f"{name:<13} {tool:<9} {result}")
            else:
                t, kernels, images, copies, pocl = result
                print(f"{name:<13} {tool:<9} {t * 1e3:>9.0f} {kernels:>8} {images:>9} "
                      f"{copies:>7} {pocl:>5}")


if __name__ == "__main__":
    run(sys.argv[1:] or DEFAULT)
