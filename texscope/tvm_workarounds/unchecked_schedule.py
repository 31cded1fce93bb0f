"""A TVM Schedule without its Python argument checks, short errors by default.

Seen on TVM 0.27 (``s_tir.Schedule``): every primitive's arguments are
checked against its annotations in Python (``inspect.signature.bind``, then a
walk of the typing hints) before the call reaches C++; on a 58-kernel model
that was most of the time spent scheduling.  ``Schedule.__init__`` holds the
GIL while C++ analyses the kernel, so kernels scheduled on several threads
wait for each other; and a failing primitive renders the whole kernel into
its message (0.8 ms, where texscope's rules use failures as tests).

:class:`UncheckedSchedule` calls the primitives directly (texscope's rules
pass TVM's own objects; what they compute is the same), is made through
TVM's constructor function (which releases the GIL), and renders short
errors unless :func:`detailed_schedule_errors` is in force.
``tests/test_tvm_workarounds.py`` fails once TVM stops checking in Python.
"""

from __future__ import annotations

import contextlib
import threading

import tvm
from tvm import s_tir
from tvm.s_tir.schedule import _type_checker


def is_type_checked(method) -> bool:
    """Whether ``method`` is wrapped in TVM's Python argument checker."""
    code = getattr(method, "__code__", None)
    return (hasattr(method, "__wrapped__") and code is not None
            and code.co_filename == _type_checker.__file__)


_traced_schedule = tvm.get_global_func("s_tir.schedule.TracedSchedule")

# TVM's ScheduleErrorRenderLevel.  A detailed error prints the whole kernel
# with the failing block underlined: 0.8 ms, for what the rules mostly use as
# a test (``try_inline`` tries every block; a reduction block fails).  The
# short message costs 0.03 ms; a kernel no rule can finish is scheduled
# again with detailed errors to say what failed (ScheduleKernels._located).
_FAST_ERRORS, _DETAILED_ERRORS = 1, 0
_error_rendering = threading.local()


@contextlib.contextmanager
def detailed_schedule_errors():
    """Within it, the schedules this thread makes render errors in full."""
    before = getattr(_error_rendering, "level", _FAST_ERRORS)
    _error_rendering.level = _DETAILED_ERRORS
    try:
        yield
    finally:
        _error_rendering.level = before


def _schedule_of(self, func: tvm.tirx.PrimFunc) -> None:
    """``Schedule(func)`` with TVM's defaults (no seed, no debug checks,
    prerequisite checks on) but short error messages (see
    :func:`detailed_schedule_errors`), made by a call of TVM's constructor
    function.  TVM's ``Schedule.__init__`` makes it through
    ``__init_handle_by_constructor__``, which holds the GIL while the C++
    analyses the kernel (about a millisecond a conv); a function call
    releases it, and kernels are scheduled on several threads."""
    level = getattr(_error_rendering, "level", _FAST_ERRORS)
    self.__move_handle_from__(_traced_schedule(tvm.IRModule({"main": func}), -1, 0, level, True))


# TVM checks every Schedule method's arguments against its annotations in
# Python (inspect.signature.bind, then a walk of typing hints) before calling
# into C++: on a 58-kernel model that is most of the time spent scheduling.
# The rules here pass TVM's own objects, so a schedule of this class calls
# the primitives directly; what they compute is the same.
UncheckedSchedule = type("UncheckedSchedule", (s_tir.Schedule,), {
    **{name: method.__wrapped__ for name, method in vars(s_tir.Schedule).items()
       if is_type_checked(method)},
    "__init__": _schedule_of,
})
