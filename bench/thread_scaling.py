"""How far TVM's passes speed up on two threads: a build's own kernels,
lowered on one thread, on two threads and in two forked processes.

texscope schedules and lowers kernels on a thread per CPU
(``texscope.backend.parallel``), relying on TVM's FFI releasing the GIL
while a pass runs.  Whether threads give what separate processes would is
measured here with TVM's own passes, nothing of texscope's in the timed work:

- ``StmtSimplify``: TVM's simplifier alone, on the kernels as they are at
  the start of TIR lowering;
- ``TIR lowering``: TVM 0.27's Adreno TIR passes in order (texscope's
  :func:`texscope.backend.lowering.tir_pipeline.adreno_tir_passes` less its own two
  Python passes, so that no Python runs while timing).

Each is run over every kernel once per round (rounds make the work long
enough to time and even out the kernels' sizes), the kernels dealt
alternately to two workers, which are: one thread (both shares in turn),
two threads, two forked processes.  Printed: wall and CPU milliseconds (the
children's CPU through ``wait4``), the speed-ups over one thread, and the
CPU time two threads take over one's.

Run: ``python bench/thread_scaling.py [network] [--rounds N]`` (default
inception, 10 rounds).  Linux only (``os.fork``).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import threading
import time

import tvm
from tvm import s_tir, tirx

import texscope
from texscope.tvm_workarounds.heap import keep_freed_memory
from texscope.backend.lowering.tir_pipeline import adreno_tir_passes
from texscope.ir.capture import PassCapture
from texscope.knowledge.targets import texture_target
from texscope.models import zoo
from _cli import Recorded, add_markdown_option

PYTHON_PASSES = ("texscope.RetypeTextureStore", "texscope.CompactUnguarded")


def kernels_of(network: str) -> list[tvm.IRModule]:
    """The network's kernels, each in a module of its own, at the start of
    TIR lowering."""
    capture = PassCapture("texscope.LowerKernels", before=True)
    with tvm.transform.PassContext(instruments=[capture]):
        texscope.build(zoo.NETWORKS[network](), "adreno-opencl", jobs=1)
    return [tvm.IRModule({gvar: func}) for gvar, func in capture.modules[0].functions.items()
            if isinstance(func, tirx.PrimFunc)]


def tvm_lowering() -> tvm.transform.Pass:
    return tvm.transform.Sequential(
        [p for p in adreno_tir_passes() if p.info.name not in PYTHON_PASSES])


def _share(kernels, work, rounds):
    def run():
        for _ in range(rounds):
            for mod in kernels:
                work(mod)
    return run


def one_thread(shares) -> tuple[float, float]:
    start, cpu = time.perf_counter(), time.process_time()
    for share in shares:
        share()
    return time.perf_counter() - start, time.process_time() - cpu


def two_threads(shares) -> tuple[float, float]:
    threads = [threading.Thread(target=share) for share in shares]
    start, cpu = time.perf_counter(), time.process_time()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start, time.process_time() - cpu


def two_processes(shares) -> tuple[float, float]:
    start, children_cpu = time.perf_counter(), 0.0
    pids = []
    for share in shares:
        pid = os.fork()
        if pid == 0:  # the child: its share, then out without Python's teardown
            share()
            os._exit(0)
        pids.append(pid)
    for pid in pids:
        _, status, usage = os.wait4(pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"a worker process failed ({status})")
        children_cpu += usage.ru_utime + usage.ru_stime
    return time.perf_counter() - start, children_cpu


def measure(kernels, work, rounds: int, repeat: int = 3) -> dict[str, tuple[float, float]]:
    """Median (wall, CPU) seconds per way of running, the ways alternating."""
    shares = [_share(kernels[0::2], work, rounds), _share(kernels[1::2], work, rounds)]
    ways = {"1 thread": one_thread, "2 threads": two_threads, "2 processes": two_processes}
    runs = {name: [] for name in ways}
    one_thread([_share(kernels, work, 1)])  # warm-up
    gc.disable()
    try:
        for _ in range(repeat):
            for name, way in ways.items():
                runs[name].append(way(shares))
    finally:
        gc.enable()
    return {name: (statistics.median(w for w, _ in r), statistics.median(c for _, c in r))
            for name, r in runs.items()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("network", nargs="?", default="inception", choices=sorted(zoo.NETWORKS))
    parser.add_argument("--rounds", type=int, default=10)
    add_markdown_option(parser)
    args = parser.parse_args(argv)
    with Recorded(args.markdown, "thread_scaling.py"):
        _report(args)


def _report(args) -> None:
    kernels = kernels_of(args.network)
    target = texture_target("adreno-opencl").target
    lowering = tvm_lowering()

    def lower(mod):
        with target:
            lowering(mod)

    works = {"StmtSimplify": s_tir.transform.StmtSimplify(), "TIR lowering": lower}
    print(f"{args.network}: {len(kernels)} kernels, {args.rounds} rounds, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}; texscope's heap settings on: {keep_freed_memory()}")
    print(f"{'work':<14} {'1 thread ms':>15} {'2 threads ms':>15} {'2 processes ms':>15}  "
          f"{'threads':>8} {'processes':>9}  {'CPU, threads / 1':>16}")
    print(f"{'':<14} {'wall / CPU':>15} {'wall / CPU':>15} {'wall / CPU':>15}  "
          f"{'speed-up':>8} {'speed-up':>9}")
    for name, work in works.items():
        figures = measure(kernels, work, args.rounds)
        one, threads, processes = (figures[k] for k in ("1 thread", "2 threads", "2 processes"))
        cells = [f"{w * 1e3:.0f} / {c * 1e3:.0f}" for w, c in (one, threads, processes)]
        print(f"{name:<14} {cells[0]:>15} {cells[1]:>15} {cells[2]:>15}  "
              f"{one[0] / threads[0]:>7.2f}x {one[0] / processes[0]:>8.2f}x  "
              f"{threads[1] / one[1]:>15.2f}x", flush=True)


if __name__ == "__main__":
    main()
