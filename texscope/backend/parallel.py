"""Kernels scheduled and lowered on several threads.

Scheduling a kernel and lowering its TIR touch that kernel alone, and TVM's
FFI releases the GIL while its C++ runs (``TVM_FFI_RELEASE_GIL_BY_DEFAULT``),
so a thread per CPU shortens the wall-clock time of a build; the CPU time it
takes stays the same.  Results are put back in the module's own order: the
output does not depend on how the threads interleave.

TVM keeps the current target and ``PassContext`` per thread; each task enters
the caller's again.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator, Sequence, TypeVar

import tvm

from ..errors import TexscopeError

JOBS_ENV = "TEXSCOPE_JOBS"
PARTS_PER_THREAD = 4
_JOBS: contextvars.ContextVar[int | None] = contextvars.ContextVar("texscope_jobs", default=None)

Item = TypeVar("Item")
Result = TypeVar("Result")


@contextlib.contextmanager
def jobs_limit(jobs: int | None) -> Iterator[None]:
    """Within it, :func:`build_jobs` is ``jobs`` (unchanged when None)."""
    if jobs is not None and (not isinstance(jobs, int) or jobs < 1):
        raise TexscopeError(f"jobs={jobs!r}: expected a whole number of threads, 1 or more")
    token = _JOBS.set(jobs if jobs is not None else _JOBS.get())
    try:
        yield
    finally:
        _JOBS.reset(token)


def build_jobs() -> int:
    """Threads a build uses: as :func:`jobs_limit` says, else ``$TEXSCOPE_JOBS``,
    else the CPUs this process may run on."""
    if _JOBS.get() is not None:
        return _JOBS.get()
    value = os.environ.get(JOBS_ENV)
    if value is None:
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if not value.isdigit() or int(value) < 1:
        raise TexscopeError(f"{JOBS_ENV}={value!r}: expected a whole number of threads, 1 or more")
    return int(value)


def map_in_order(fn: Callable[[Item], Result], items: Sequence[Item], jobs: int) -> list[Result]:
    """``[fn(item) for item in items]``, on up to ``jobs`` threads, each under
    the caller's PassContext and target."""
    if jobs <= 1 or len(items) <= 1:
        return [fn(item) for item in items]
    context = tvm.transform.PassContext.current()
    target = tvm.target.Target.current(allow_none=True)

    def in_context(item):
        with context:
            if target is None:
                return fn(item)
            with target:
                return fn(item)

    with ThreadPoolExecutor(max_workers=min(jobs, len(items))) as pool:
        return list(pool.map(in_context, items))


def chunks(items: Sequence[Item], count: int, smallest: int = 1) -> list[list[Item]]:
    """``items`` dealt into at most ``count`` lists of at least ``smallest`` each
    (consecutive runs, so each list keeps the items' order)."""
    count = max(1, min(count, len(items) // max(smallest, 1)))
    size, extra = divmod(len(items), count)
    out, start = [], 0
    for index in range(count):
        end = start + size + (index < extra)
        out.append(list(items[start:end]))
        start = end
    return out


def per_chunk(pipeline: tvm.transform.Pass, jobs: int | None = None,
              name: str = "texscope.PerChunk") -> tvm.transform.Pass:
    """``pipeline`` run on parts of the module on up to ``jobs`` threads.

    For pipelines that lower each function on its own (TVM's TIR lowering).
    Each part holds two functions at least: TVM's ``AnnotateEntryFunc``
    marks a module's only function as its entry point.  Parts are runs of the
    module's functions in order, joined in order: code generators emit
    functions in the module's order.
    """

    @tvm.transform.module_pass(opt_level=0, name=name)
    def run(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        threads = build_jobs() if jobs is None else jobs
        # Kernels differ in cost by tens of times (a conv against a pad): more
        # parts than threads, taken as threads come free, even the load out.
        parts = chunks(list(mod.functions.items()), threads * PARTS_PER_THREAD if threads > 1
                       else 1, smallest=2)
        if len(parts) == 1:
            return pipeline(mod)
        lowered = map_in_order(
            lambda part: pipeline(tvm.IRModule(dict(part), attrs=mod.attrs,
                                               global_infos=mod.global_infos)), parts, threads)
        functions = {gvar: func for part in lowered for gvar, func in part.functions.items()}
        return tvm.IRModule(functions, attrs=lowered[0].attrs, global_infos=lowered[0].global_infos)

    return run
