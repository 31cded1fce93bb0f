"""TVM's fallback schedules with their thread splits unguarded
(texscope.backend.schedules.fallback) against TVM's own rules, the Adreno one
and the generic GPU one: the same scheduled kernel, or the same failure, on
every kernel of the zoo TVM's rule takes (and, under ``real_models``, of
every importable MediaPipe model)."""

import pytest
import tvm
from tvm import s_tir
from tvm.s_tir import dlight
from tvm.script import tirx as T

import texscope
from conftest import ADRENO, BeforeScheduling, tally_same_schedule, tvms_thread_split
from test_tflite import IMPORTABLE
from texscope.backend.schedules.kernels import BufferFallback, TextureFallback
from texscope.frontend.tflite_model import load_tflite
from texscope.models import zoo


def _kernels(mod) -> list:
    capture = BeforeScheduling()
    with tvm.transform.PassContext(instruments=[capture]):
        texscope.build(mod, "adreno-opencl")
    return [f for f in capture.module.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]


def _outcome(rule, func):
    try:
        return rule.apply(func, ADRENO, False)
    except s_tir.ScheduleError as err:
        return err


def _compare(kernels, theirs_rule=dlight.adreno.Fallback, ours_rule=TextureFallback) -> dict:
    """Our rule against TVM's (given our threads per block) wherever TVM's
    takes a kernel; how many were scheduled (guarded among them, and with
    fewer threads than TVM's 256) and how many failed alike."""
    seen = {"scheduled": 0, "guarded": 0, "fewer_threads": 0, "failed": 0}
    with ADRENO:
        for func in kernels:
            ours = _outcome(ours_rule(), func)
            with tvms_thread_split():
                theirs = _outcome(theirs_rule(), func)
            if theirs is None:
                assert ours is None, func.script()
                continue
            if isinstance(theirs, s_tir.ScheduleError):
                assert isinstance(ours, s_tir.ScheduleError), func.script()
                seen["failed"] += 1
                continue
            tally_same_schedule(seen, ours.mod, theirs.mod)
    return seen


@pytest.fixture(scope="module")
def zoo_kernels() -> list:
    return [k for name in ("resnet", "mobilenet_v2", "unet", "inception", "chain64")
            for k in _kernels(zoo.NETWORKS[name]())]


def test_the_zoos_kernels_get_tvms_fallback_schedule(zoo_kernels):
    seen = _compare(zoo_kernels)
    assert seen["scheduled"] >= 15 and seen["fewer_threads"] >= 10 and seen["failed"] >= 10


def test_the_zoos_kernels_get_tvms_gpu_fallback_schedule(zoo_kernels):
    seen = _compare(zoo_kernels, dlight.gpu.Fallback, BufferFallback)
    assert seen["scheduled"] >= 50 and seen["fewer_threads"] >= 40


def test_on_tvms_thread_count_the_zoos_kernels_get_tvms_guarded_schedules(zoo_kernels,
                                                                          tvms_thread_count):
    """256 threads leave a remainder on most of the zoo's kernels: the guards
    texscope appends are the ones TVM's split appends."""
    seen = _compare(zoo_kernels)
    assert seen["scheduled"] >= 15 and seen["guarded"] >= 10 and seen["fewer_threads"] == 0
    seen = _compare(zoo_kernels, dlight.gpu.Fallback, BufferFallback)
    assert seen["scheduled"] >= 50 and seen["guarded"] >= 15


@pytest.mark.real_models
@pytest.mark.parametrize("name", IMPORTABLE)
def test_a_real_models_kernels_get_tvms_fallback_schedules(mediapipe, name):
    kernels = _kernels(load_tflite(mediapipe[name]))
    _compare(kernels)
    assert _compare(kernels, dlight.gpu.Fallback, BufferFallback)["scheduled"] == len(kernels)


def test_the_thread_split_does_not_guard_the_block_itself(split_recorder, tvms_thread_count):
    """A guarded split would first fail to prove its guard needless, through Z3."""
    with ADRENO:
        taken = [f for f in _kernels(zoo.NETWORKS["mobilenet_v2"]())
                 if isinstance(_outcome(dlight.adreno.Fallback(), f), s_tir.Schedule)]
        calls = split_recorder()
        scheduled = [TextureFallback().apply(f, ADRENO, False) for f in taken]
    assert any("T.where" in s.mod.script() for s in scheduled)
    assert len(calls) == len(taken) and all(calls)


def test_the_gpu_fallbacks_thread_split_does_not_guard_by_a_proof(split_recorder,
                                                                 tvms_thread_count):
    with ADRENO:
        kernels = _kernels(zoo.NETWORKS["mobilenet_v2"]())
        calls = split_recorder()
        scheduled = [BufferFallback().apply(f, ADRENO, False) for f in kernels]
    assert sum("T.where" in s.mod.script() for s in scheduled) >= 5
    assert calls and all(calls)


# pylint: disable=no-self-argument,missing-function-docstring
@T.prim_func(private=True, s_tir=True)
def relu_of_any_length(var_x: T.handle, var_y: T.handle):
    n = T.int64()
    x = T.match_buffer(var_x, (n, 4))
    y = T.match_buffer(var_y, (n, 4))
    for i, j in T.grid(n, 4):
        with T.sblock("relu"):
            vi, vj = T.axis.remap("SS", [i, j])
            y[vi, vj] = T.max(x[vi, vj], T.float32(0))
# pylint: enable=no-self-argument,missing-function-docstring


def test_a_kernel_of_symbolic_size_gets_tvms_gpu_fallback_schedule():
    """Whether 256 threads divide n * 4 is not known: TVM's split guards it."""
    seen = _compare([relu_of_any_length], dlight.gpu.Fallback, BufferFallback)
    assert seen == {"scheduled": 1, "guarded": 1, "fewer_threads": 0, "failed": 0}
