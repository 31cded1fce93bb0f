"""TVM's GeneralReduction with its thread splits unguarded
(texscope.backend.schedules.reduction) against TVM's own rule: the same
scheduled kernel on every kernel of the zoo TVM's rule takes (and, under
``real_models``, of every importable MediaPipe model), and on a kernel of
each of the rule's forms."""

import pytest
import tvm
from tvm import s_tir
from tvm.s_tir import dlight
from tvm.script import tirx as T

import texscope
from conftest import ADRENO, VULKAN, BeforeScheduling
from test_tflite import IMPORTABLE
from texscope.backend.schedules.kernels import GeneralReduction
from texscope.frontend.tflite_model import load_tflite
from texscope.models import zoo


# pylint: disable=no-self-argument,missing-function-docstring
@T.prim_func(private=True, s_tir=True)
def softmax(x: T.Buffer((1, 32, 2, 2), "float32"), out: T.Buffer((1, 32, 2, 2), "float32")):
    """Over 32 channels: each split leaves 224 of 256 threads idle."""
    largest = T.sblock_alloc_buffer((1, 2, 2))
    total = T.sblock_alloc_buffer((1, 2, 2))
    for n, h, w, c in T.grid(1, 2, 2, 32):
        with T.sblock("largest"):
            vn, vh, vw, vc = T.axis.remap("SSSR", [n, h, w, c])
            with T.init():
                largest[vn, vh, vw] = T.float32(-3.4e38)
            largest[vn, vh, vw] = T.max(largest[vn, vh, vw], x[vn, vc, vh, vw])
    for n, h, w, c in T.grid(1, 2, 2, 32):
        with T.sblock("total"):
            vn, vh, vw, vc = T.axis.remap("SSSR", [n, h, w, c])
            with T.init():
                total[vn, vh, vw] = T.float32(0)
            total[vn, vh, vw] = total[vn, vh, vw] + T.exp(x[vn, vc, vh, vw] - largest[vn, vh, vw])
    for n, c, h, w in T.grid(1, 32, 2, 2):
        with T.sblock("out"):
            vn, vc, vh, vw = T.axis.remap("SSSS", [n, c, h, w])
            out[vn, vc, vh, vw] = T.exp(x[vn, vc, vh, vw] - largest[vn, vh, vw]) / total[vn, vh, vw]


@T.prim_func(private=True, s_tir=True)
def row_mean(x: T.Buffer((6, 512), "float32"), out: T.Buffer((6,), "float32")):
    """The tail has fewer iterators than the reduction: laid out as it."""
    total = T.sblock_alloc_buffer((6,))
    for i, k in T.grid(6, 512):
        with T.sblock("total"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                total[vi] = T.float32(0)
            total[vi] = total[vi] + x[vi, vk]
    for i in range(6):
        with T.sblock("mean"):
            vi = T.axis.spatial(6, i)
            out[vi] = total[vi] * T.float32(1.0 / 512)


@T.prim_func(private=True, s_tir=True)
def row_mean_of_any_length(var_x: T.handle, out: T.Buffer((6,), "float32")):
    """A reduction of symbolic extent: TVM's own split guards it."""
    k = T.int64()
    x = T.match_buffer(var_x, (6, k))
    total = T.sblock_alloc_buffer((6,))
    for i, j in T.grid(6, k):
        with T.sblock("total"):
            vi, vj = T.axis.remap("SR", [i, j])
            with T.init():
                total[vi] = T.float32(0)
            total[vi] = total[vi] + x[vi, vj]
    for i in range(6):
        with T.sblock("mean"):
            vi = T.axis.spatial(6, i)
            out[vi] = total[vi] / T.Cast("float32", k)


@T.prim_func(private=True, s_tir=True)
def scalar_mean(x: T.Buffer((4, 8), "float32"), out: T.Buffer((), "float32")):
    """Down to a scalar: every block on a unit thread."""
    total = T.sblock_alloc_buffer(())
    for i, j in T.grid(4, 8):
        with T.sblock("total"):
            vi, vj = T.axis.remap("RR", [i, j])
            with T.init():
                total[()] = T.float32(0)
            total[()] = total[()] + x[vi, vj]
    with T.sblock("mean"):
        out[()] = total[()] * T.float32(0.03125)
# pylint: enable=no-self-argument,missing-function-docstring


def _kernels(mod) -> list:
    capture = BeforeScheduling()
    with tvm.transform.PassContext(instruments=[capture]):
        texscope.build(mod, "adreno-opencl")
    return [f for f in capture.module.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]


def _outcome(rule, func, target):
    try:
        return rule.apply(func, target, False)
    except s_tir.ScheduleError as err:
        return err


def _compare(kernels, target=ADRENO) -> dict:
    """Ours against TVM's rule on every kernel: how many were scheduled
    (guarded among them), declined, failed alike."""
    seen = {"scheduled": 0, "guarded": 0, "declined": 0, "failed": 0}
    with target:
        for func in kernels:
            theirs = _outcome(dlight.gpu.GeneralReduction(), func, target)
            ours = _outcome(GeneralReduction(), func, target)
            if theirs is None or isinstance(theirs, s_tir.ScheduleError):
                assert type(ours) is type(theirs), func.script()
                seen["declined" if theirs is None else "failed"] += 1
                continue
            tvm.ir.assert_structural_equal(ours.mod, theirs.mod)
            seen["scheduled"] += 1
            seen["guarded"] += "T.where" in ours.mod.script()
    return seen


@pytest.mark.parametrize("target", [ADRENO, VULKAN], ids=["opencl", "vulkan"])
def test_each_form_of_the_rule_gets_tvms_schedule(target):
    seen = _compare([softmax, row_mean, row_mean_of_any_length, scalar_mean], target)
    assert seen == {"scheduled": 4, "guarded": 3, "declined": 0, "failed": 0}


# pylint: disable=no-self-argument,missing-function-docstring
@T.prim_func(private=True, s_tir=True)
def row_mean_scheduled(x: T.Buffer((6, 512), "float32"), out: T.Buffer((6,), "float32")):
    total_shared = T.sblock_alloc_buffer((6,), scope="shared")
    for ax0_fused in T.thread_binding(6, thread="blockIdx.x"):
        for ax0 in range(1):
            for ax1_fused_1 in T.thread_binding(256, thread="threadIdx.x"):
                for ax1_fused_0 in T.serial(2, annotations={"pragma_auto_unroll_max_step": 64,
                                                            "pragma_unroll_explicit": 1}):
                    with T.sblock("total"):
                        v0 = T.axis.spatial(6, ax0_fused + ax0)
                        v1 = T.axis.reduce(512, ax1_fused_0 * 256 + ax1_fused_1)
                        T.reads(x[v0, v1])
                        T.writes(total_shared[v0])
                        with T.init():
                            total_shared[v0] = T.float32(0.0)
                        total_shared[v0] = total_shared[v0] + x[v0, v1]
        for ax1_1 in T.thread_binding(T.int64(256), thread="threadIdx.x"):
            for ax1_0 in T.serial(T.int64(1), annotations={"pragma_auto_unroll_max_step": 64,
                                                           "pragma_unroll_explicit": 1}):
                with T.sblock("mean"):
                    v0 = T.axis.spatial(6, ax0_fused)
                    v1 = T.axis.spatial(T.int64(1), ax1_0 * T.int64(256) + ax1_1)
                    T.where(ax1_0 * T.int64(256) + ax1_1 < T.int64(1))
                    T.reads(total_shared[v0])
                    T.writes(out[v0])
                    out[v0] = total_shared[v0] * T.float32(0.001953125)
# pylint: enable=no-self-argument,missing-function-docstring


def test_a_tail_of_fewer_iterators_is_laid_out_as_the_reduction():
    """The mean's one iterator becomes the sum's two (the second of extent 1,
    split over the threads and guarded); the sum's 512 divide by 256."""
    with ADRENO:
        scheduled = GeneralReduction().apply(row_mean, ADRENO, False)
    tvm.ir.assert_structural_equal(scheduled.mod["main"], row_mean_scheduled)


def test_the_zoos_kernels_get_tvms_general_reduction():
    kernels = [k for name in ("resnet", "mobilenet_v2", "unet", "inception")
               for k in _kernels(zoo.NETWORKS[name]())]
    seen = _compare(kernels)
    assert seen["scheduled"] >= 15 and seen["guarded"] >= 15 and seen["declined"] >= 20


@pytest.mark.real_models
@pytest.mark.parametrize("name", IMPORTABLE)
def test_a_real_models_kernels_get_tvms_general_reduction(mediapipe, name):
    assert _compare(_kernels(load_tflite(mediapipe[name])))["scheduled"] > 0


def test_no_split_is_guarded_by_a_proof(split_recorder):
    """A guarded split would first fail to prove its guard needless, through Z3."""
    calls = split_recorder()
    with ADRENO:
        scheduled = GeneralReduction().apply(softmax, ADRENO, False)
    assert scheduled.mod.script().count("T.where") == 3
    assert calls == [True, True, True]
