"""Kernels equal but for where their tensors live are scheduled once."""

import tvm
from tvm import s_tir
from tvm.s_tir import dlight
from tvm.script import tirx as T

from conftest import ADRENO, BeforeScheduling, dlight_scheduled
from texscope.backend.build import build
from texscope.backend.schedules.kernels import (EpilogueConv2d, PackedLayoutTransform, ScheduleKernels,
                                                schedule_rules)
from texscope.backend.schedules.scope_variants import scope_variants, with_scopes_of
from texscope.models import zoo


@T.prim_func(s_tir=True)
def add_one(a: T.Buffer((8, 4), "float32"), b: T.Buffer((8, 4), "float32")):
    for i, j in T.grid(8, 4):
        with T.sblock("b"):
            vi, vj = T.axis.remap("SS", [i, j])
            b[vi, vj] = a[vi, vj] + T.float32(1)


@T.prim_func(s_tir=True)
def add_one_from_image(a: T.Buffer((8, 4), "float32", scope="global.texture-weight"),
                       b: T.Buffer((8, 4), "float32")):
    for i, j in T.grid(8, 4):
        with T.sblock("b"):
            vi, vj = T.axis.remap("SS", [i, j])
            b[vi, vj] = a[vi, vj] + T.float32(1)


@T.prim_func(s_tir=True)
def add_one_from_image_named_x(x: T.Buffer((8, 4), "float32", scope="global.texture-weight"),
                               b: T.Buffer((8, 4), "float32")):
    for i, j in T.grid(8, 4):
        with T.sblock("b"):
            vi, vj = T.axis.remap("SS", [i, j])
            b[vi, vj] = x[vi, vj] + T.float32(1)


@T.prim_func(s_tir=True)
def add_two(a: T.Buffer((8, 4), "float32"), b: T.Buffer((8, 4), "float32")):
    for i, j in T.grid(8, 4):
        with T.sblock("b"):
            vi, vj = T.axis.remap("SS", [i, j])
            b[vi, vj] = a[vi, vj] + T.float32(2)


class BlindCaching(dlight.ScheduleRule):
    """A rule blind to scopes that copies the kernel's input into registers
    (a buffer the schedule names after the input), counting its calls."""

    ignores_scopes = True

    def __init__(self):
        self.calls = 0

    def is_target_available(self, target):
        return True

    @staticmethod
    def may_take(func):
        return True

    def apply(self, func, target, tunable):
        self.calls += 1
        sch = s_tir.Schedule(func)
        block = sch.get_sblock("b")
        i, _ = sch.get_loops(block)
        sch.compute_at(sch.cache_read(block, 0, "local"), i)
        return sch


def _scheduled_alone(rule, func):
    return rule.apply(func, None, False).mod["main"].with_attr("tirx.is_scheduled", True)


def test_functions_equal_but_for_parameter_scopes_are_variants():
    funcs = [add_one, add_two, add_one_from_image, add_one_from_image_named_x]
    # Names are not compared; scopes and bodies are.
    assert scope_variants(funcs) == {2: 0, 3: 0}
    assert scope_variants(funcs, considered=lambda f: not f.same_as(add_one)) == {3: 2}
    assert scope_variants([add_one, add_two]) == {}


def test_a_variant_gets_the_schedule_with_its_own_scopes():
    rule = BlindCaching()
    scheduled = _scheduled_alone(rule, add_one)
    shared = with_scopes_of(scheduled, add_one, add_one_from_image)
    direct = _scheduled_alone(rule, add_one_from_image)
    tvm.ir.assert_structural_equal(shared, direct)
    assert shared.script() == direct.script()
    assert "global.texture-weight" in shared.script()


def test_a_schedule_naming_a_buffer_after_a_renamed_parameter_is_not_shared():
    rule = BlindCaching()
    scheduled = _scheduled_alone(rule, add_one)
    assert "a_local" in scheduled.script()
    assert with_scopes_of(scheduled, add_one, add_one_from_image_named_x) is None
    with ADRENO:
        out = ScheduleKernels(rule, jobs=1)(tvm.IRModule(
            {"add_one": add_one, "add_one_x": add_one_from_image_named_x}))
    assert rule.calls == 3  # both in the module, the named one again
    assert "x_local" in out["add_one_x"].script()


def test_a_rule_that_reads_scopes_schedules_each_variant():
    blind = BlindCaching()

    class Reading(BlindCaching):
        ignores_scopes = False

    reading = Reading()
    mod = tvm.IRModule({"add_one": add_one, "add_one_image": add_one_from_image})
    with ADRENO:
        shared = ScheduleKernels(blind, jobs=1)(mod)
        alone = ScheduleKernels(reading, jobs=1)(mod)
    assert (blind.calls, reading.calls) == (1, 2)
    tvm.ir.assert_structural_equal(shared, alone)
    assert shared.script() == alone.script()


def _before_scheduling(name: str) -> tvm.IRModule:
    capture = BeforeScheduling()
    with tvm.transform.PassContext(instruments=[capture]):
        build(zoo.NETWORKS[name](), "adreno-opencl", jobs=1)
    return capture.module


def test_convs_and_unpacks_of_images_and_buffers_are_scheduled_once(monkeypatch):
    """The inception block's two convs and two unpacks (copies made by
    SplitPrimFuncsBySignature) and chain64's last residual conv (FuseTIR's,
    its parameters named otherwise) get the schedule of the kernel they
    equal, as ``ApplyDefaultSchedule`` makes it for each."""
    for name, shared_kernels in (("inception", 2), ("chain64", 1)):
        mod = _before_scheduling(name)
        taken = []

        def counting(rule_class, monkeypatch=monkeypatch):
            apply = rule_class.apply

            def apply_counted(self, func, target, tunable):
                out = apply(self, func, target, tunable)
                if out is not None:
                    taken.append(func)
                return out

            monkeypatch.setattr(rule_class, "apply", apply_counted)

        rules = schedule_rules()
        counting(EpilogueConv2d)
        counting(PackedLayoutTransform)
        with ADRENO:
            expected = dlight_scheduled(mod, *rules)
            each = len(taken)
            taken.clear()
            shared = ScheduleKernels(*rules, jobs=2)(mod)
        monkeypatch.undo()
        assert len(taken) == each - shared_kernels, name
        tvm.ir.assert_structural_equal(shared, expected)
        for gvar, func in expected.functions.items():
            assert shared[gvar.name_hint].script() == func.script(), gvar.name_hint
