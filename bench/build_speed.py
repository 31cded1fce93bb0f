"""Build time: texscope against TVM's generic OpenCL build, one process.

Per model, TVM 0.27's own GPU build (``tvm.compile(mod,
Target({"kind": "opencl"}, host="llvm"))``, buffers only) and
``texscope.build(mod, "adreno-opencl")``, after a warm-up of each, alternating
(so load on the machine falls on both alike), garbage collection off while
timing; printed: the medians, their ratio (the target is <= 0.5x), the
stage of texscope's build that took longest, and the peak device memory of
both builds (``texscope.backend.memory``: as the VM allocates after TVM's memory
planning, texscope's image storages sized by ``SizeTextureStorages``; for
texscope also the texel padding in its peak; ``bench/memory.py`` compares
the peaks in full).

Models: texscope's zoo, and the MediaPipe 0.10.14 .tflite models of
``texscope.models.corpus`` (fetched on first use), imported once by texscope's
loader and given to both tools (those TVM's TFLite importer reads; the others
are listed as skipped with the importer's reason).

Run: ``python bench/build_speed.py [--repeat N] [--profile] [model ...]``
(``--profile`` prints texscope's time per pass for each model).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

import tvm

import texscope
from texscope.models import corpus, zoo
from texscope.frontend.tflite_model import load_tflite
try:
    from texscope.backend.memory import MemoryCapture, device_memory
    from texscope.diagnostics.pass_timing import render
except ImportError:  # texscope before these existed (a "before" run): times only
    MemoryCapture = device_memory = render = None

GENERIC = tvm.target.Target({"kind": "opencl"}, host="llvm")
TEXSCOPE = "adreno-opencl"
ZOO = ("resnet", "mobilenet_v2", "unet", "inception", "chain64")


def models(names: list[str]) -> dict[str, object]:
    """name -> a loader, for the zoo and every .tflite of the corpus."""
    found = {f"zoo/{name}": zoo.NETWORKS[name] for name in ZOO}
    for name, path in sorted(corpus.mediapipe_models().items()):
        found[name] = lambda path=path: load_tflite(path)
    if names:
        found = {k: v for k, v in found.items() if k in names or k.split("/")[-1] in names}
    return found


def _timed(fn, mod) -> float:
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        fn(mod)
        return time.perf_counter() - start
    finally:
        gc.enable()


def tvm_generic(mod):
    return tvm.compile(mod, GENERIC)


def texscope_build(mod):
    return texscope.build(mod, TEXSCOPE)


def generic_memory(mod):
    """Peak device memory of TVM's generic (all-buffer) build."""
    if MemoryCapture is None:
        return None
    capture = MemoryCapture()
    with tvm.transform.PassContext(instruments=[capture]):
        tvm_generic(mod)
    return device_memory(capture.modules[-1]).peak_bytes


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:.2f}"


def measure(mod, repeat: int) -> dict[str, list[float]]:
    tools = {"tvm": tvm_generic, "texscope": texscope_build}
    for fn in tools.values():
        fn(mod)  # warm-up: lazily registered functions, caches
    times = {tool: [] for tool in tools}
    for _ in range(repeat):
        for tool, fn in tools.items():
            times[tool].append(_timed(fn, mod))
    return times


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    print(f"{'model':<34} {'TVM generic s':>13} {'texscope s':>10} {'ratio':>6}  "
          f"{'memory MiB: TVM':>15} {'texscope':>8} {'padding':>8}  texscope's longest stage")
    for name, load in models(args.models).items():
        try:
            mod = load()
        except Exception as err:  # the importer's own errors: report, go on
            print(f"{name:<34} skipped: {type(err).__name__}: {str(err).splitlines()[0][:60]}")
            continue
        times = measure(mod, args.repeat)
        ours, theirs = statistics.median(times["texscope"]), statistics.median(times["tvm"])
        result = texscope.build(mod, TEXSCOPE, time_passes=args.profile)
        stages = {k[:-2]: v for k, v in result.report.build.items()
                  if k.endswith("_s") and k != "build_s"}
        longest = max(stages, key=stages.get)
        figures = result.report.build
        print(f"{name:<34} {theirs:>13.2f} {ours:>10.2f} {ours / theirs:>5.2f}x  "
              f"{_mib(generic_memory(mod)):>15} {_mib(figures.get('memory_peak_bytes')):>8} "
              f"{_mib(figures.get('memory_texel_padding_bytes')):>8}  "
              f"{longest} {stages[longest]:.2f} s of {figures['build_s']:.2f}", flush=True)
        if args.profile:
            print(render(list(result.pass_times), result.report.build["build_s"], top=8))


if __name__ == "__main__":
    main()
