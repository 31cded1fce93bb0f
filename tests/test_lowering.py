"""texscope's TIR lowering: TVM's Adreno pipeline, buffers compacted
unguarded, ifs hoisted only where a kernel has one."""

import pytest
import tvm_ffi
import tvm
from tvm.script import tirx as T
from tvm.s_tir.backend.adreno import pipeline as tvm_adreno

import texscope
from texscope.backend.lowering import tir_pipeline as lowering
from texscope.tvm_workarounds.hidden_conditions import conditions_shown
from texscope.frontend.tflite_model import load_tflite
from texscope.ir.capture import PassCapture
from texscope.ir.tir import allocated_scopes, has_if_statement
from texscope.models import zoo
from test_real_models import IMPORTABLE

_TVMS = "s_tir.CompactBufferAllocation"
_FLATTEN = "s_tir.backend.adreno.TextureFlatten"
_HOISTING = "s_tir.HoistIfThenElse"
_IF_THEN_ELSE = tvm.ir.Op.get("prim.if_then_else")


@tvm.instrument.pass_instrument
class _PassNames:
    """The names of the passes run at one nesting depth."""

    def __init__(self, depth: int):
        self.depth, self.level, self.names = depth, 0, []

    def run_before_pass(self, _mod, info):
        if self.level == self.depth:
            self.names.append(info.name)
        self.level += 1

    def run_after_pass(self, _mod, _info):
        self.level -= 1


def _names(pipeline, depth, mod, **config):
    names = _PassNames(depth)
    with tvm.transform.PassContext(instruments=[names], config=config):
        pipeline(mod)
    return names.names


@pytest.mark.parametrize("config", [{}, {"tirx.disable_storage_rewrite": True,
                                         "tirx.disable_cse_tir": True}])
def test_the_pipeline_is_tvms_adreno_one_but_for_stores_compaction_hoisting_and_conditions(config):
    before_lowering = PassCapture("texscope.AdrenoTIRPipeline", before=True)
    with tvm.transform.PassContext(instruments=[before_lowering]):
        texscope.build(zoo.NETWORKS["inception"](), "adreno-opencl", jobs=1)
    module = before_lowering.modules[0]
    theirs = _names(tvm_adreno.default_tir_pipeline(), 2, module, **config)
    ours = _names(lowering.adreno_tir_pipeline, 2, module, **config)
    assert _TVMS in theirs and theirs.count(_FLATTEN) == 1 and theirs.count(_HOISTING) == 1
    ours_instead = {_TVMS: "texscope.CompactUnguarded",
                    _HOISTING: "texscope.HoistIfThenElseWhereAny"}
    # Conditions hidden from the start to the int64 narrowing, and from
    # vectorization to the end of the clean-up.
    shown_before = {_FLATTEN: "texscope.HideConditions",
                    "tirx.NarrowDataType": "texscope.ShowConditions",
                    "tirx.FP8ComputeLegalize": "texscope.ShowConditions"}
    expected = []
    for name in theirs:
        if name in shown_before:
            expected.append(shown_before[name])
        expected.append(ours_instead.get(name, name))
        if name == _FLATTEN:
            expected.append("texscope.RetypeTextureStore")
        if name == "tirx.VectorizeLoop":
            expected.append("texscope.HideConditions")
    assert ours == expected


def _kernels_before(pass_name: str, mod) -> list:
    """Each kernel a build's pass of this name is given, as a module of its own."""
    capture = PassCapture(pass_name, before=True)
    with tvm.transform.PassContext(instruments=[capture]):
        texscope.build(mod, "adreno-opencl", jobs=1)
    return [tvm.IRModule({gvar: func}, attrs=part.attrs) for part in capture.modules
            for gvar, func in part.functions.items() if isinstance(func, tvm.tirx.PrimFunc)]


def _kernels_before_compaction(mod):
    return [item for kernel in _kernels_before("texscope.CompactUnguarded", mod)
            for item in kernel.functions.items()]


def _assert_compacted_as_tvm_does(mod) -> int:
    """Compares every kernel with TVM's pass given it with its conditions in
    sight; returns how many were compacted with guards out of the pass's sight
    (predicates set aside, conditions hidden)."""
    kernels = _kernels_before_compaction(mod)
    unguarded = 0
    for gvar, func in kernels:
        shown = conditions_shown(func)
        theirs = tvm.s_tir.transform.CompactBufferAllocation()(tvm.IRModule({gvar: shown}))[gvar]
        tvm.ir.assert_structural_equal(conditions_shown(lowering._compacted(func)), theirs)
        if allocated_scopes(func.body) <= {"local", "global"}:
            _, predicates = lowering._predicates_set_aside(func)
            unguarded += bool(predicates or _guards_seen(shown))
    return unguarded


@pytest.mark.parametrize("name", sorted(zoo.NETWORKS))
def test_buffers_are_compacted_as_tvm_compacts_them(name):
    unguarded = _assert_compacted_as_tvm_does(zoo.NETWORKS[name]())
    # A padded conv guards its register cache's texel by an if_then_else.
    assert unguarded or name in {"seed"}


@pytest.mark.real_models
@pytest.mark.parametrize("name", IMPORTABLE)
def test_a_real_models_buffers_are_compacted_as_tvm_compacts_them(mediapipe, name):
    assert _assert_compacted_as_tvm_does(load_tflite(mediapipe[name]))


def test_a_kernel_allocating_nothing_skips_compaction(monkeypatch):
    """The pool of the inception block allocates no buffer: TVM's pass would
    return it unchanged (the tests above compare every kernel), so it is
    not run."""
    kernels = _kernels_before_compaction(zoo.NETWORKS["inception"]())
    bare = [func for _, func in kernels if not allocated_scopes(func.body)]
    assert bare

    def refuse(_mod):
        raise AssertionError("TVM's compaction run on a kernel allocating nothing")

    monkeypatch.setattr(lowering, "_COMPACT", refuse)
    for func in bare:
        assert lowering._compacted(func).same_as(func)


def test_a_kernel_sharing_memory_keeps_tvms_compaction(monkeypatch):
    kernels = _kernels_before_compaction(zoo.NETWORKS["inception"]())
    shared = [func for _, func in kernels if "shared" in allocated_scopes(func.body)]
    assert shared

    def refuse(_func):
        raise AssertionError("predicates set aside in a kernel with shared memory")

    monkeypatch.setattr(lowering, "_predicates_set_aside", refuse)
    for func in shared:
        lowering._compacted(func)


def _assert_lowered_as_with_tvms_hoisting(mod):
    with_tvms = tvm.transform.Sequential([
        tvm.s_tir.transform.HoistIfThenElse() if p is lowering.HoistIfThenElseWhereAny else p
        for p in lowering.adreno_tir_passes()])
    skipped = 0
    for kernel in _kernels_before("texscope.AdrenoTIRPipeline", mod):
        tvm.ir.assert_structural_equal(lowering.adreno_tir_pipeline(kernel), with_tvms(kernel))
    for kernel in _kernels_before("texscope.HoistIfThenElseWhereAny", mod):
        skipped += not any(has_if_statement(f.body) for f in kernel.functions.values())
    assert skipped


@pytest.mark.parametrize("name", ["inception", "mobilenet_v2", "resnet", "unet"])
def test_kernels_lower_as_with_tvms_hoisting(name):
    _assert_lowered_as_with_tvms_hoisting(zoo.NETWORKS[name]())


@pytest.mark.real_models
@pytest.mark.parametrize("name", IMPORTABLE)
def test_a_real_models_kernels_lower_as_with_tvms_hoisting(mediapipe, name):
    _assert_lowered_as_with_tvms_hoisting(load_tflite(mediapipe[name]))


def _hoisted(monkeypatch, config: dict) -> tuple[list, list]:
    """Inception's kernels as hoisting gets them, and those it handed TVM's
    pass under ``config``."""
    kernels = _kernels_before("texscope.HoistIfThenElseWhereAny", zoo.NETWORKS["inception"]())
    hoisted = []
    monkeypatch.setattr(lowering, "_HOIST", lambda mod: hoisted.append(mod) or mod)
    with tvm.transform.PassContext(config=config):
        for kernel in kernels:
            lowering.HoistIfThenElseWhereAny(kernel)
    return kernels, hoisted


def test_hoisting_runs_on_kernels_with_an_if_statement_only(monkeypatch):
    kernels, hoisted = _hoisted(monkeypatch, {})
    with_if = [k for k in kernels if any(has_if_statement(f.body) for f in k.functions.values())]
    assert 0 < len(with_if) < len(kernels) and len(hoisted) == len(with_if)


def test_hoisting_on_block_variables_asked_for_is_never_skipped(monkeypatch):
    config = {"s_tir.HoistIfThenElse": {"support_block_scope_hoisting": True}}
    kernels, hoisted = _hoisted(monkeypatch, config)
    assert len(hoisted) == len(kernels)


# pylint: disable=no-self-argument,missing-function-docstring
@T.prim_func(private=True)
def guarded_copy(x: T.Buffer((300,), "float32"), y: T.Buffer((300,), "float32")):
    for i in range(512):
        if i < 300:
            y[i] = x[i]


@T.prim_func(private=True)
def selected_copy(x: T.Buffer((300,), "float32"), y: T.Buffer((300,), "float32")):
    for i in range(300):
        y[i] = T.if_then_else(i < 150, x[i], T.float32(0))
# pylint: enable=no-self-argument,missing-function-docstring


def test_an_if_statement_is_told_from_an_if_then_else_expression():
    assert has_if_statement(guarded_copy.body)
    assert not has_if_statement(selected_copy.body)


def _guards_seen(mod) -> list:
    """Block predicates other than True, and if_then_else conditions, in ``mod``."""
    found = []

    def on_realize(realize):
        if not (isinstance(realize.predicate, tvm.tirx.IntImm) and int(realize.predicate) == 1):
            found.append(realize.predicate)
        return realize

    def on_call(call):
        if call.op.same_as(_IF_THEN_ELSE):
            found.append(call.args[0])
        return call

    tvm_ffi.structural_map(mod, [(tvm.s_tir.SBlockRealize, on_realize), (tvm.ir.Call, on_call)])
    return found


def test_tvms_compaction_sees_no_guard_of_a_kernel_allocating_registers(monkeypatch):
    """A padded conv's register cache holds its texel under the padding's
    bounds test: TVM's pass is given the kernel with that test hidden and
    the tiles' guards set aside, and the kernel gets the guards back."""
    kernels = [func for _, func in _kernels_before_compaction(zoo.NETWORKS["inception"]())
               if allocated_scopes(func.body) == {"local"}
               and _guards_seen(conditions_shown(func))]
    assert kernels
    given = []
    tvms = lowering._COMPACT
    monkeypatch.setattr(lowering, "_COMPACT", lambda mod: given.append(mod) or tvms(mod))
    for func in kernels:
        compacted = lowering._compacted(func)
        assert tvm.s_tir.analysis.verify_well_formed(compacted)
        assert len(_guards_seen(compacted)) == len(_guards_seen(func))
        assert len(_guards_seen(conditions_shown(compacted))) == \
            len(_guards_seen(conditions_shown(func)))
    assert len(given) == len(kernels)
    assert not any(_guards_seen(mod) for mod in given)
