"""Build time: texscope against TVM's generic OpenCL build, one process.

Per model, TVM 0.27's own GPU build (``tvm.compile(mod,
Target({"kind": "opencl"}, host="llvm"))``, buffers only) and
``texscope.build(mod, "adreno-opencl")``, after a warm-up of each, alternating
(so load on the machine falls on both alike), garbage collection off while
timing; printed: the medians, their ratio (the target is <= 0.5x), the
lowest and highest ratio of one repeat's two builds ("pairs": how far this
machine's noise moves a single comparison), the stage of texscope's build
that took longest, and the peak device memory of
both builds (``texscope.backend.memory.device_memory``: as the VM allocates after memory
planning, TVM's for its build, texscope's storage assignment for texscope's
(``texscope.backend.memory.storage_plan``); for texscope also the texel padding in
its peak; ``bench/memory.py`` compares the peaks in full).

Models: texscope's zoo, and the MediaPipe 0.10.14 .tflite models of
``texscope.models.corpus`` (fetched on first use), imported once by texscope's
loader and given to both tools (those TVM's TFLite importer reads; the others
are listed as skipped with the importer's reason).

Times are wall clock and this process's CPU time (user and system, all
threads: on a machine others load, CPU time moves less); the load average is
printed with each model.  texscope schedules and lowers kernels on one thread
per CPU (``--jobs`` sets how many): that shortens its wall clock, not its CPU
time.  texscope compiles the host code at LLVM opt-level 0, TVM's build at
LLVM's default.  In one process both tools run under the same C heap settings:
texscope's build keeps freed blocks in the heap (``texscope.tvm_workarounds.heap``),
which speeds up TVM's generic build too once the warm-up has set it.

Run: ``python bench/build_speed.py [--repeat N] [--jobs N] [--profile]
[--no-memory] [--save FILE] [--before FILE] [model ...]`` (a model: a zoo
network, a corpus model's name, or the path of a ``.tflite`` file) (``--profile``
prints texscope's time per pass for each model, from the median of
``--repeat`` more builds on one thread, and the least ratio its threads
could reach: the time outside the passes that run on threads, plus theirs
split evenly, over TVM's median; ``--save`` writes the medians as JSON, and
``--before`` prints the ratios such a file holds next to today's: run it
once with ``PYTHONPATH`` on an older checkout and ``--save``, then here).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time
from pathlib import Path

import tvm

import texscope
from texscope.models import zoo
from _cli import ZOO, Columns, Recorded, add_markdown_option, chosen_models, loaded
try:
    from texscope.backend.memory.device_memory import MemoryCapture, device_memory
    from texscope.diagnostics.pass_timing import render
except ImportError:  # texscope before these existed (a "before" run): times only
    MemoryCapture = device_memory = render = None
try:
    from texscope.backend.build import THREADED_PASSES
    from texscope.backend.parallel import build_jobs
    from texscope.diagnostics.pass_timing import threaded_share
except ImportError:
    THREADED_PASSES = threaded_share = None

GENERIC = tvm.target.Target({"kind": "opencl"}, host="llvm")
TEXSCOPE = "adreno-opencl"
SPEED_COLUMNS = Columns(
    ("model", -34), ("TVM generic s", 13), ("texscope s", 10), ("ratio", 6), ("pairs", 9),
    ("CPU ratio", 9), None, ("before: ratio", 13), ("CPU ratio", 9), None, ("load", 4), None,
    ("memory MiB: TVM", 15), ("texscope", 8), ("padding", 8), None,
    ("texscope's longest stage", 0))


def _timed(fn, mod) -> tuple[float, float]:
    """Wall and CPU seconds of one call."""
    gc.collect()
    gc.disable()
    try:
        start, cpu = time.perf_counter(), time.process_time()
        fn(mod)
        return time.perf_counter() - start, time.process_time() - cpu
    finally:
        gc.enable()


def tvm_generic(mod):
    return tvm.compile(mod, GENERIC)


JOBS = {}  # texscope.build's keyword for threads, when --jobs is given


def texscope_build(mod):
    return texscope.build(mod, TEXSCOPE, **JOBS)


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


def measure(mod, repeat: int) -> dict:
    """Medians: ``tvm_s``, ``texscope_s`` (wall), ``tvm_cpu_s``, ``texscope_cpu_s``;
    and ``pair_ratios``, texscope's wall time over TVM's in each repeat (the
    two builds right after each other, so a drift of the machine's speed
    falls on both)."""
    tools = {"tvm": tvm_generic, "texscope": texscope_build}
    for fn in tools.values():
        fn(mod)  # warm-up: lazily registered functions, caches
    times = {tool: [] for tool in tools}
    for _ in range(repeat):
        for tool, fn in tools.items():
            times[tool].append(_timed(fn, mod))
    medians = {}
    for tool, runs in times.items():
        medians[f"{tool}_s"] = statistics.median(wall for wall, _ in runs)
        medians[f"{tool}_cpu_s"] = statistics.median(cpu for _, cpu in runs)
    medians["pair_ratios"] = [round(ours[0] / theirs[0], 4)
                              for theirs, ours in zip(times["tvm"], times["texscope"])]
    return medians


def profiled(mod, repeat: int):
    """Of ``repeat`` builds timed per pass (on one thread), the median by
    build time: one such build varies as much as the medians above do."""
    results = sorted((texscope.build(mod, TEXSCOPE, time_passes=True) for _ in range(repeat)),
                     key=lambda r: r.report.build["build_s"])
    return results[len(results) // 2]


def _ratio(figures: dict | None, kind: str = "") -> float | None:
    if not figures:
        return None
    return figures[f"texscope{kind}_s"] / figures[f"tvm{kind}_s"]


def _x(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def _spread(figures: dict) -> str:
    """The lowest and highest ratio of one repeat's pair of builds."""
    pairs = figures.get("pair_ratios") or []
    return f"{min(pairs):.2f}-{max(pairs):.2f}" if pairs else "-"


def _load() -> str:
    return f"{os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else "-"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--jobs", type=int, help="threads for texscope (default: one per CPU)")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory columns")
    parser.add_argument("--save", type=Path, help="write the medians here (JSON)")
    parser.add_argument("--before", type=Path, help="medians --save wrote earlier")
    add_markdown_option(parser)
    args = parser.parse_args(argv)
    found = chosen_models(parser, args.models, {name: zoo.NETWORKS[name] for name in ZOO})
    with Recorded(args.markdown, "build_speed.py"):
        _report(args, found)


def _report(args, found) -> None:
    before = json.loads(args.before.read_text()) if args.before else {}
    saved = {}
    if args.jobs:
        JOBS["jobs"] = args.jobs
    print(f"load average at start: {_load()} on {os.cpu_count()} cores; texscope's threads: "
          f"{args.jobs or 'one per CPU'}")
    print(SPEED_COLUMNS.header())
    for name, mod in loaded(found, 34):
        figures = measure(mod, args.repeat)
        saved[name] = figures
        result = profiled(mod, args.repeat) if args.profile else texscope.build(mod, TEXSCOPE)
        stages = {k[:-2]: v for k, v in result.report.build.items()
                  if k.endswith("_s") and k != "build_s"}
        longest = max(stages, key=stages.get)
        build = result.report.build
        generic = None if args.no_memory else generic_memory(mod)
        print(SPEED_COLUMNS.line(
            name, f"{figures['tvm_s']:.2f}", f"{figures['texscope_s']:.2f}",
            _x(_ratio(figures)), _spread(figures), _x(_ratio(figures, "_cpu")),
            _x(_ratio(before.get(name))), _x(_ratio(before.get(name), "_cpu")), _load(),
            _mib(generic), _mib(None if args.no_memory else build.get("memory_peak_bytes")),
            _mib(None if args.no_memory else build.get("memory_texel_padding_bytes")),
            f"{longest} {stages[longest]:.2f} s of {build['build_s']:.2f}"), flush=True)
        if args.profile:
            passes, one_thread = list(result.pass_times), result.report.build["build_s"]
            if threaded_share is None:
                print(render(passes, one_thread, top=8))
            else:
                jobs = args.jobs or build_jobs()
                print(render(passes, one_thread, top=8, threaded=THREADED_PASSES, jobs=jobs))
                least = threaded_share(passes, one_thread, THREADED_PASSES).least_seconds(jobs)
                print(f"at best {least / figures['tvm_s']:.2f}x TVM's generic build on {jobs} "
                      f"thread{'s' * (jobs != 1)}, at this build's CPU time (target 0.50x)")
        if args.save:
            args.save.write_text(json.dumps(saved, indent=1))


if __name__ == "__main__":
    main()
