"""The layout transform's schedule (texscope.backend.schedules.layout) against
TVM's own Adreno LayoutTransform rule: the same scheduled kernel, or a
decline where TVM's rule fails, on every layout transform of the zoo for
both targets (and, under ``real_models``, of every importable MediaPipe
model)."""

import pytest
import tvm
from tvm import s_tir
from tvm.s_tir import dlight

import texscope
from conftest import ADRENO, BeforeScheduling, tally_same_schedule, tvms_thread_split
from modules import texel_cases
from test_tflite import IMPORTABLE
from texscope.backend.schedules import kernels as schedule
from texscope.backend.schedules.layout import LAYOUT_TRANSFORM_BLOCK, schedule_layout_transform
from texscope.frontend.tflite_model import load_tflite
from texscope.models import zoo


def _layout_transforms(mod, target="adreno-opencl") -> list:
    capture = BeforeScheduling()
    with tvm.transform.PassContext(instruments=[capture]):
        texscope.build(mod, target)
    return [func for func in capture.module.functions.values()
            if isinstance(func, tvm.tirx.PrimFunc) and LAYOUT_TRANSFORM_BLOCK in func.script()]


def _tvms(func):
    """TVM's rule, None where it fails (its TypeError branches)."""
    try:
        return dlight.adreno.LayoutTransform().apply(func, ADRENO, False)
    except TypeError:
        return None


def _compare(kernels) -> dict:
    """Our schedule against TVM's (given our threads per block) on every
    kernel; how many were guarded, scheduled and declined."""
    seen = {"guarded": 0, "scheduled": 0, "declined": 0, "fewer_threads": 0}
    with ADRENO:
        for func in kernels:
            ours = schedule_layout_transform(s_tir.Schedule(func))
            with tvms_thread_split():
                theirs = _tvms(func)
            assert (ours is None) == (theirs is None), func.script()
            if ours is None:
                seen["declined"] += 1
                continue
            tally_same_schedule(seen, ours.mod, theirs.mod)
    return seen


@pytest.fixture(scope="module")
def zoo_layout_transforms() -> list:
    return [k for name in ("resnet", "mobilenet_v2", "unet", "inception", "chain64")
            for target in ("adreno-opencl", "mali-opencl")
            for k in _layout_transforms(zoo.NETWORKS[name](), target)]


def test_the_zoos_layout_transforms_get_tvms_schedule(zoo_layout_transforms):
    seen = _compare(zoo_layout_transforms)
    # Blocks of whole rows, fewer than 256 threads, and TVM's failing branches occur.
    assert seen["fewer_threads"] >= 10 and seen["scheduled"] > seen["fewer_threads"] \
        and seen["declined"] >= 5


def test_on_tvms_thread_count_the_zoos_layout_transforms_get_tvms_guarded_schedule(
        zoo_layout_transforms, tvms_thread_count):
    seen = _compare(zoo_layout_transforms)
    # Guarded thread splits, dividing ones and TVM's failing branches all occur.
    assert seen["guarded"] >= 5 and seen["scheduled"] > seen["guarded"] and seen["declined"] >= 5


def test_where_tvms_rule_fails_the_kernel_is_declined_for_the_next_rule():
    func = texel_cases.half_unpack
    with ADRENO:
        assert _tvms(func) is None
        assert schedule_layout_transform(s_tir.Schedule(func)) is None
        assert schedule.PackedLayoutTransform().apply(func, ADRENO, False) is None


def test_the_thread_split_does_not_guard_the_blocks_itself(split_recorder, tvms_thread_count):
    """Its guard goes on in one replacement: split would simplify the
    bindings under it (most of TVM's rule's time)."""
    kernels = _layout_transforms(zoo.NETWORKS["inception"]())
    calls = split_recorder()
    with ADRENO:
        taken = [schedule.PackedLayoutTransform().apply(f, ADRENO, False) for f in kernels]
    assert any(taken) and calls.count(True) == sum(1 for t in taken if t is not None)


@pytest.mark.real_models
@pytest.mark.parametrize("name", IMPORTABLE)
def test_a_real_models_layout_transforms_get_tvms_schedule(mediapipe, name):
    mod = load_tflite(mediapipe[name])
    _compare(_layout_transforms(mod) + _layout_transforms(mod, "mali-opencl"))


def test_a_fused_kernel_beginning_with_a_layout_transform_is_declined_unscheduled(monkeypatch):
    """TVM's rule takes a kernel whose only block is the transform; asked of
    the PrimFunc, a longer one is declined before a Schedule is made."""
    kernels = [func for name in ("mobilenet_v2", "unet")
               for func in _layout_transforms(zoo.NETWORKS[name]())
               if len(schedule._blocks(func)) > 1
               and schedule._blocks(func)[0].name_hint == LAYOUT_TRANSFORM_BLOCK]
    def refuse(_self, func):
        raise AssertionError(f"a Schedule was made of {func.script()}")

    with ADRENO:
        assert len(kernels) == 3 and all(_tvms(func) is None for func in kernels)
        monkeypatch.setattr(schedule.UncheckedSchedule, "__init__", refuse)
        assert [schedule.PackedLayoutTransform().apply(f, ADRENO, False) for f in kernels] \
            == [None] * 3
