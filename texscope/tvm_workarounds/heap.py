"""Process memory during a build: freed C memory kept for the next
allocation, Python's cyclic collector paused.

TVM 0.27's arithmetic analyzer gives every solver it materializes a Z3
context of its own, a few MiB allocated and freed again for many schedule
primitives and TIR passes (``split``, ``compute_at``, simplification).  With
glibc's default (dynamic) thresholds those blocks go back to the kernel when
freed, so the next one is faulted in page by page: building hand_recrop
took 541k minor page faults (``getrusage``), about a quarter of the build's
CPU time; 121 with the thresholds below.

:func:`keep_freed_memory` sets the two thresholds to the ceilings glibc's
own dynamic adjustment would reach (``M_MMAP_THRESHOLD`` 32 MiB,
``M_TRIM_THRESHOLD`` twice that), once per process: such blocks then come
from the heap and stay there between uses; a heap with more than 64 MiB free
at its top is still trimmed.  Other C libraries are left as they are.

Seen on TVM 0.27.0.post1.  Measured again on 2026-11-28 (a whole build of
hand_recrop in a fresh process, 2-core VM): 19.8k minor page faults with
these thresholds against 24.7k with glibc's dynamic ones, build time within
noise: most of the gain measured earlier is gone (why was not
established).  No canary test: re-measure on a TVM upgrade and drop
the module where the two agree.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
from typing import Iterator

# glibc's mallopt parameters (malloc.h) and its dynamic thresholds' ceilings
# on 64-bit hosts (DEFAULT_MMAP_THRESHOLD_MAX; the trim threshold follows at 2x).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 * 2**20
TRIM_THRESHOLD_BYTES = 2 * MMAP_THRESHOLD_BYTES

_done: list[bool] = []


def _glibc():
    """glibc's handle, or None under another C library."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        version = libc.gnu_get_libc_version  # glibc only
    except (OSError, AttributeError):
        return None
    version.restype = ctypes.c_char_p
    return libc


def keep_freed_memory(libc=None) -> bool:
    """Let freed blocks of up to 32 MiB stay in the process's heap.

    Parameters
    ----------
    libc : ctypes library, optional
        The C library to configure (glibc found at run time when None).

    Returns
    -------
    bool
        Whether the thresholds are set (now or by an earlier call).
    """
    if _done and libc is None:
        return _done[0]
    lib = _glibc() if libc is None else libc
    ok = lib is not None and bool(lib.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) \
        and bool(lib.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
    if libc is None:
        _done.append(ok)
    return ok


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off within, as it was after."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
