"""TVM's Adreno fallback schedule with its thread split unguarded
(texscope.backend.fallback_schedule) against TVM's own rule: the same
scheduled kernel, or the same failure, on every kernel of the zoo TVM's rule
takes (and, under ``real_models``, of every importable MediaPipe model)."""

import pytest
import tvm
from tvm import s_tir
from tvm.s_tir import dlight

import texscope
from conftest import ADRENO, BeforeScheduling
from test_tflite import IMPORTABLE
from texscope.backend.schedule import TextureFallback
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


def _compare(kernels) -> dict:
    """TextureFallback against TVM's rule wherever TVM's rule takes a kernel;
    how many were scheduled (guarded among them) and how many failed alike."""
    seen = {"scheduled": 0, "guarded": 0, "failed": 0}
    with ADRENO:
        for func in kernels:
            theirs = _outcome(dlight.adreno.Fallback(), func)
            if theirs is None:
                continue
            ours = _outcome(TextureFallback(), func)
            if isinstance(theirs, s_tir.ScheduleError):
                assert isinstance(ours, s_tir.ScheduleError), func.script()
                seen["failed"] += 1
                continue
            tvm.ir.assert_structural_equal(ours.mod, theirs.mod)
            seen["scheduled"] += 1
            seen["guarded"] += "T.where" in ours.mod.script()
    return seen


def test_the_zoos_kernels_get_tvms_fallback_schedule():
    kernels = [k for name in ("resnet", "mobilenet_v2", "unet", "inception", "chain64")
               for k in _kernels(zoo.NETWORKS[name]())]
    seen = _compare(kernels)
    assert seen["scheduled"] >= 15 and seen["guarded"] >= 10 and seen["failed"] >= 10


@pytest.mark.real_models
@pytest.mark.parametrize("name", IMPORTABLE)
def test_a_real_models_kernels_get_tvms_fallback_schedule(mediapipe, name):
    _compare(_kernels(load_tflite(mediapipe[name])))


def test_the_thread_split_does_not_guard_the_block_itself(split_recorder):
    """A guarded split would first fail to prove its guard needless, through Z3."""
    with ADRENO:
        taken = [f for f in _kernels(zoo.NETWORKS["mobilenet_v2"]())
                 if isinstance(_outcome(dlight.adreno.Fallback(), f), s_tir.Schedule)]
        calls = split_recorder()
        scheduled = [TextureFallback().apply(f, ADRENO, False) for f in taken]
    assert any("T.where" in s.mod.script() for s in scheduled)
    assert len(calls) == len(taken) and all(calls)
