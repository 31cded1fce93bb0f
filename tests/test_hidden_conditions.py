"""if_then_else conditions hidden from TVM's analyzers between two points of
the lowering pipeline, and shown again."""

import pytest
import tvm
import tvm_ffi
from tvm.script import tirx as T

import texscope
from texscope.backend.lowering import tir_pipeline as lowering
from texscope.tvm_workarounds.hidden_conditions import HIDDEN_IF_THEN_ELSE, conditions_hidden, conditions_shown
from texscope.frontend.tflite_model import load_tflite
from texscope.ir.capture import PassCapture
from texscope.ir.tir import allocated_scopes
from texscope.models import zoo
from test_real_models import IMPORTABLE

_IF_THEN_ELSE = tvm.ir.Op.get("prim.if_then_else")


# pylint: disable=no-self-argument,missing-function-docstring
@T.prim_func(private=True)
def padded_copy(x: T.Buffer((28,), "float32"), y: T.Buffer((30,), "float32")):
    for i in range(30):
        y[i] = T.if_then_else(1 <= i and i < 29, x[i - 1], T.float32(0))


@T.prim_func(private=True)
def padded_copy_hidden(x: T.Buffer((28,), "float32"), y: T.Buffer((30,), "float32")):
    for i in range(30):
        y[i] = T.call_pure_extern("float32", "texscope_if_then_else", 1 <= i and i < 29, x[i - 1],
                                  T.float32(0))


@T.prim_func(private=True)
def settled_copies(x: T.Buffer((28,), "float32"), y: T.Buffer((28,), "float32"),
                   z: T.Buffer((28,), "float32")):
    for i in range(28):
        y[i] = T.call_pure_extern("float32", "texscope_if_then_else", T.bool(True), x[i],
                                  T.float32(0))
        z[i] = T.call_pure_extern("float32", "texscope_if_then_else", T.bool(False), x[i],
                                  T.float32(0))


@T.prim_func(private=True)
def settled_copies_shown(x: T.Buffer((28,), "float32"), y: T.Buffer((28,), "float32"),
                         z: T.Buffer((28,), "float32")):
    for i in range(28):
        y[i] = x[i]
        z[i] = T.float32(0)
# pylint: enable=no-self-argument,missing-function-docstring


def test_a_condition_is_hidden_as_a_pure_call_and_shown_as_it_was():
    assert HIDDEN_IF_THEN_ELSE == "texscope_if_then_else"
    hidden = conditions_hidden(padded_copy)
    tvm.ir.assert_structural_equal(hidden, padded_copy_hidden)
    assert tvm.tirx.analysis.verify_well_formed(hidden)
    tvm.ir.assert_structural_equal(conditions_shown(hidden), padded_copy)


def test_a_condition_settled_while_hidden_shows_the_branch_it_selects():
    """As TVM's simplifier replaces an if_then_else of a constant condition."""
    tvm.ir.assert_structural_equal(conditions_shown(settled_copies), settled_copies_shown)


def test_tvms_simplifier_gets_no_fact_from_a_hidden_condition():
    simplify = tvm.tirx.transform.StmtSimplify()
    seen = tvm.IRModule({"main": padded_copy})
    assert tvm_ffi.structural_equal(simplify(seen)["main"], padded_copy)
    hidden = tvm.IRModule({"main": conditions_hidden(padded_copy)})
    assert tvm_ffi.structural_equal(conditions_shown(simplify(hidden)["main"]), padded_copy)


@tvm.instrument.pass_instrument
class _ConditionsInSight:
    """For each pass of texscope's TIR pipeline: whether a kernel allocating
    registers only held a visible if_then_else, and how many hidden ones."""

    def __init__(self):
        self.passes = []  # (pass name, visible, hidden)

    def run_before_pass(self, mod, info):
        visible = hidden = 0
        for func in mod.functions.values():
            if isinstance(func, tvm.tirx.PrimFunc) and \
                    allocated_scopes(func.body) <= {"local", "global"}:
                v, h = _count(func)
                visible, hidden = visible + v, hidden + h
        self.passes.append((info.name, visible, hidden))


def _count(func) -> tuple[int, int]:
    calls = []
    tvm_ffi.structural_map(func, (tvm.ir.Call, lambda call: calls.append(call) or call))
    visible = sum(call.op.same_as(_IF_THEN_ELSE) for call in calls)
    hidden = sum(isinstance(call.args[0], tvm.ir.StringImm)
                 and call.args[0].value == HIDDEN_IF_THEN_ELSE for call in calls if call.args)
    return visible, hidden


def _inception_given_to(pass_name: str) -> list:
    """The modules a build of the inception block gives the passes of this name."""
    capture = PassCapture(pass_name, before=True)
    with tvm.transform.PassContext(instruments=[capture]):
        texscope.build(zoo.NETWORKS["inception"](), "adreno-opencl", jobs=1)
    return capture.modules


def _pipeline_passes(config=None) -> list:
    """Inception's kernels through texscope's TIR pipeline: each pass with the
    conditions it was given."""
    (kernels,) = _inception_given_to("texscope.AdrenoTIRPipeline")
    seen = _ConditionsInSight()
    with tvm.transform.PassContext(instruments=[seen], config=config or {}):
        lowering.adreno_tir_pipeline(kernels)
    return [entry for entry in seen.passes if entry[0] not in
            ("texscope.AdrenoTIRPipeline", "sequential")]


def test_tvms_simplification_and_clean_up_see_no_condition_of_a_kernel_allocating_registers():
    """Between the hiding points, no pass is given a visible if_then_else of
    inception's padded conv and pool; outside, every pass is given them."""
    passes = _pipeline_passes()
    names = [name for name, _, _ in passes]
    inside, hidden = False, []
    for name, visible, held in passes:
        if name == "texscope.HideConditions":
            inside = True
        elif name == "texscope.ShowConditions":
            inside = False
            continue
        if inside and name != "texscope.HideConditions":
            assert visible == 0, name
            hidden.append(name)
        elif not inside:
            assert held == 0, name
    assert {"s_tir.StmtSimplify", "tirx.StmtSimplify", "tirx.RemoveNoOp",
            "s_tir.InjectVirtualThread", "tirx.FlattenBuffer"} <= set(hidden)
    assert {"tirx.NarrowDataType", "s_tir.LoopPartition", "tirx.VectorizeLoop",
            "s_tir.ThreadSync", "tirx.SplitHostDevice"} & set(names) <= \
        set(names) - set(hidden)
    assert max(held for _, _, held in passes) >= 2  # the conv's and the pool's


@pytest.mark.parametrize("config", [
    {"tirx.instrument_bound_checkers": True},
    {"tirx.s_tir.ldg32": True},
    {"s_tir.HoistIfThenElse": {"support_block_scope_hoisting": True}},
])
def test_conditions_stay_in_sight_where_bound_checks_hoisting_or_ldg32_read_them(config):
    assert all(held == 0 for _, _, held in _pipeline_passes(config))


def test_a_scheduled_kernel_with_its_conditions_hidden_is_well_formed():
    # The first hiding point is given the scheduled kernels.
    scheduled = _inception_given_to("texscope.HideConditions")[0]
    padded = [f for f in scheduled.functions.values() if sum(_count(f))]
    assert padded
    for func in padded:
        hidden = conditions_hidden(func)
        assert _count(hidden)[0] == 0 and tvm.s_tir.analysis.verify_well_formed(hidden)
        tvm.ir.assert_structural_equal(conditions_shown(hidden), func)


def test_a_kernel_sharing_memory_keeps_its_conditions():
    shared = [f for k in _inception_given_to("texscope.HideConditions") for f in k.functions.values()
              if "shared" in allocated_scopes(f.body)]
    assert shared and all(lowering._keeps_conditions(f) for f in shared)
    assert all(lowering.HideConditions(tvm.IRModule({"main": f}))["main"].same_as(f)
               for f in shared)


def _assert_the_source_tvms_passes_write_in_sight(mod, monkeypatch) -> None:
    hidden = texscope.build(mod, "adreno-opencl", jobs=1)
    with monkeypatch.context() as patch:
        patch.setattr(lowering, "_keeps_conditions", lambda func: True)
        in_sight = texscope.build(mod, "adreno-opencl", jobs=1)
    assert hidden.opencl_source == in_sight.opencl_source


@pytest.mark.parametrize("name", ["inception", "mobilenet_v2", "resnet", "unet"])
def test_kernels_compile_to_the_source_tvms_passes_write_with_conditions_in_sight(
        name, monkeypatch):
    _assert_the_source_tvms_passes_write_in_sight(zoo.NETWORKS[name](), monkeypatch)


@pytest.mark.real_models
@pytest.mark.parametrize("name", IMPORTABLE)
def test_a_real_models_kernels_compile_to_the_source_written_with_conditions_in_sight(
        mediapipe, name, monkeypatch):
    _assert_the_source_tvms_passes_write_in_sight(load_tflite(mediapipe[name]), monkeypatch)
