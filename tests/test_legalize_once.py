"""Legalizing each signature once leaves the module legalizing every call makes."""

import pytest
import tvm
import tvm_ffi
from tvm import relax

import texscope
from conftest import run_pass
from modules import legalize_once as cases
from texscope import convert_layout
from texscope.ir.graph import relax_bindings
from texscope.knowledge.targets import texture_target
from texscope.models import zoo
from texscope.rewrites import legalize
from texscope.rewrites import legalize_once
from texscope.rewrites.legalize_once import TargetBinding, once_per_signature, output_storage_blind


def _counting(calls: list):
    def table(op_name):
        default = tvm.ir.Op.get(op_name).get_attr("FLegalize")

        def count(bb, call):
            calls.append(call)
            return default(bb, call)

        return count

    return table


def test_calls_with_constants_are_legalized_once_per_signature():
    calls = []
    table = {op: once_per_signature(_counting(calls)(op)) for op in ("relax.add", "relax.maximum")}
    out = run_pass(relax.transform.LegalizeOps(table), cases.SharedSignatures)
    # add of a bias (a, b, c: one signature), of variables (g, h); maximum
    # against 0 (d, e) and against 1 (f).  Each call was legalized before.
    assert len(calls) == 4
    expected = relax.transform.LegalizeOps()(cases.SharedSignatures)
    tvm.ir.assert_structural_equal(out, expected)
    assert out.script() == expected.script()  # parameter names too


def test_a_repeat_calls_the_first_kernel_while_it_is_unchanged(monkeypatch):
    """The bias adds b and c repeat a's legalization: a's PrimFunc is still in
    the builder as it was added, so they call it without a renamed copy being
    added (which the builder would have matched to a's, after hashing it)."""
    from texscope.rewrites import legalize_once

    renamed = []
    named_after = legalize_once._named_after
    monkeypatch.setattr(legalize_once, "_named_after",
                        lambda func, operands: renamed.append(func) or named_after(func, operands))
    table = {op: once_per_signature(tvm.ir.Op.get(op).get_attr("FLegalize"))
             for op in ("relax.add", "relax.maximum")}
    out = run_pass(relax.transform.LegalizeOps(table), cases.SharedSignatures)
    assert renamed == []
    expected = relax.transform.LegalizeOps()(cases.SharedSignatures)
    assert out.script() == expected.script()


def _variables_only(legalization, _binding=None, **_options):
    """What stage 1 did before: a call of variables only calls the PrimFunc of
    an earlier one with the same attributes and types; every other call is
    legalized anew (and LegalizeOps binds each kernel to its target)."""
    seen = []

    def run(bb, call):
        if not all(isinstance(arg, relax.Var) for arg in call.args):
            return legalization(bb, call)
        signature = (call.attrs, *(arg.ty for arg in call.args), call.ty)
        for known, lowered in seen:
            if tvm_ffi.structural_equal(known, signature):
                return relax.Call(lowered.op, [lowered.args[0], relax.Tuple(list(call.args))],
                                  lowered.attrs, lowered.ty_args)
        lowered = legalization(bb, call)
        if lowered.op.name == "relax.call_tir" and len(lowered.args) == 2 and all(
                a.same_as(b) for a, b in zip(lowered.args[1].fields, call.args)) \
                and len(lowered.args[1].fields) == len(call.args):
            seen.append((signature, lowered))
        return lowered

    return run


def _stage1_and_te_calls(mod):
    te_calls = []
    call_te = relax.BlockBuilder.call_te

    def counting(builder, *args, **kwargs):
        te_calls.append(args[0])
        return call_te(builder, *args, **kwargs)

    relax.BlockBuilder.call_te = counting
    try:
        packed = convert_layout.ConvertToPackedLayout("adreno-opencl")(mod)
    finally:
        relax.BlockBuilder.call_te = call_te
    return packed, len(te_calls)


def _resnet():
    return zoo.with_constant_weights(zoo.NETWORKS["resnet"]())


def test_stage1_computes_each_kernel_once(monkeypatch):
    once, te_once = _stage1_and_te_calls(_resnet())
    for module in (convert_layout, legalize):
        monkeypatch.setattr(module, "once_per_signature", _variables_only)
    every, te_every = _stage1_and_te_calls(_resnet())
    # The same module, names and all, from a fraction of the TE computes.
    tvm.ir.assert_structural_equal(once, every)
    assert once.script() == every.script()
    assert te_once * 2 < te_every


def test_the_build_is_the_one_legalizing_as_before_makes(monkeypatch):
    mobilenet = zoo.with_constant_weights(zoo.NETWORKS["mobilenet_v2"]())
    once = texscope.build(mobilenet, "adreno-opencl")
    for module in (convert_layout, legalize):
        monkeypatch.setattr(module, "once_per_signature", _variables_only)
    before = texscope.build(mobilenet, "adreno-opencl")
    assert tvm_ffi.structural_equal(once.module, before.module)
    assert once.opencl_source == before.opencl_source


def test_a_kernel_is_recorded_once(monkeypatch):
    updates = []
    update_func = relax.BlockBuilder.update_func

    def counting(builder, gvar, func):
        updates.append(gvar.name_hint)
        return update_func(builder, gvar, func)

    monkeypatch.setattr(relax.BlockBuilder, "update_func", counting)
    with tvm.target.Target("opencl"):
        out = convert_layout.LegalizeKeepingAttrs()(cases.SharedSignatures)
    # One kernel a signature, recorded once: b and c call a's (a constant
    # bias each), e calls d's, h calls g's.  The names b and e would have
    # taken stay taken, as when each call added a copy to be merged.
    assert updates == ["add", "maximum", "maximum2", "add3"]
    assert all(func.attrs["texscope_op"]["op"] in ("relax.add", "relax.maximum")
               for gvar, func in out.functions.items() if gvar.name_hint != "main")
    callee = {binding.var.name: binding.value.args[0].name_hint
              for _, binding in relax_bindings(out) if isinstance(binding.value, relax.Call)}
    assert [callee[v] for v in "abcdefgh"] == [
        "add", "add", "add", "maximum", "maximum", "maximum2", "add3", "add3"]


def _annotated(network, constant_weights: bool = False):
    """A network after stages 1-5: its packed convs are calls whose types
    place them on VDevices, of variables only or of constant weights."""
    target = texture_target("adreno-opencl").target
    if constant_weights:
        network = zoo.with_constant_weights(network)
    with target:
        return texscope.texture_scope_pipeline(target)(network), target


def _annotated_chain(constant_weights: bool = False):
    return _annotated(zoo.conv_chain(8), constant_weights)


@pytest.mark.parametrize("constant_weights", [False, True])
def test_each_signature_is_bound_to_its_target_by_its_first_call(constant_weights):
    """LegalizeOps gives a kernel a copy carrying its call's target after
    every call, hashing the kernel each time; here the first call of a
    signature makes the copy, and the calls repeating it call the copy."""
    mod, target = _annotated_chain(constant_weights)
    binding = TargetBinding()
    callees = []

    def noting(legalize_call):
        def run(bb, call):
            lowered = legalize_call(bb, call)
            callees.append(bb.get()[lowered.args[0]])
            return lowered
        return run

    table = {op: noting(once_per_signature(f, binding))
             for op, f in legalize.packed_legalizations().items()}
    with target:
        relax.transform.LegalizeOps(table)(mod)
    assert len(callees) == 8 and binding.bound_any
    assert all(func.attrs["target"].kind.name == "opencl" for func in callees)


@pytest.mark.parametrize("constant_weights", [False, True])
def test_binding_kernels_here_leaves_the_module_legalizeops_binding_makes(constant_weights,
                                                                          monkeypatch):
    mod, target = _annotated_chain(constant_weights)
    with target:
        # Well formed, the input left alone.
        ours = run_pass(legalize.LegalizeOnce(legalize.packed_legalizations()), mod)
        monkeypatch.setattr(TargetBinding, "__call__", lambda self, bb, lowered: lowered)
        theirs = legalize.LegalizeOnce(legalize.packed_legalizations())(mod)
    tvm.ir.assert_structural_equal(ours, theirs)
    assert ours.script() == theirs.script()


def test_a_repeated_call_does_not_read_its_kernel_back(monkeypatch):
    """Stage 1 records attributes on a call's kernel once; a call repeating
    one already recorded returns without reading the builder's module, so
    six ReLUs of one signature read it as often as one does."""
    reads = []
    get = relax.BlockBuilder.get
    monkeypatch.setattr(relax.BlockBuilder, "get", lambda bb: reads.append(1) or get(bb))

    def reads_legalizing(length):
        reads.clear()
        with tvm.target.Target("opencl"):
            out = convert_layout.LegalizeKeepingAttrs()(zoo.conv_chain(length, residual_every=100))
        relus = [f for g, f in out.functions.items() if g.name_hint.startswith("relu")]
        assert len(relus) == 1 and relus[0].attrs["texscope_op"]["op"] == "relax.nn.relu"
        return len(reads)

    assert reads_legalizing(6) == reads_legalizing(1)


def _annotated_inception(constant_weights: bool):
    return _annotated(zoo.NETWORKS["inception"](), constant_weights)


@pytest.mark.parametrize("constant_weights", [False, True])
def test_convs_storing_their_results_apart_share_one_legalization(constant_weights):
    """The inception block's two convs have one shape; the plan stores one's
    result in an image and the other's in a buffer.  The packed conv's
    legalization hands the call's ty_args to call_te as they are, so the
    second call repeats the first's kernel with its own ty_args: the
    module legalizing each call makes, from one TE compute."""
    mod, target = _annotated_inception(constant_weights)
    results = {binding.value.ty_args[0].vdevice.memory_scope
               for _, binding in relax_bindings(mod)
               if isinstance(binding.value, relax.Call)
               and getattr(binding.value.op, "name", "") == "relax.nn.conv2d"}
    assert results == {"global", "global.texture-weight"}

    def legalized(blind: bool):
        computes = []

        def counting(bb, call):
            computes.append(call)
            return legalize.conv2d_nchwc(bb, call)

        if blind:
            output_storage_blind(counting)
        with target:
            out = run_pass(legalize.LegalizeOnce({"relax.nn.conv2d": counting}), mod)
        return out, len(computes)

    once, computed_once = legalized(blind=True)
    every, computed_every = legalized(blind=False)
    assert (computed_once, computed_every) == (1, 2)
    tvm.ir.assert_structural_equal(once, every)
    assert once.script() == every.script()


def test_a_storage_blind_repeat_keeps_its_own_device():
    """Only the memory scope is left out of the signature: a conv placed on
    another device index is legalized on its own."""
    mod, target = _annotated_inception(False)
    convs = [binding.value for _, binding in relax_bindings(mod)
             if isinstance(binding.value, relax.Call)
             and getattr(binding.value.op, "name", "") == "relax.nn.conv2d"]
    first, second = convs
    placed = second.ty_args[0]
    elsewhere = relax.VDevice(placed.vdevice.target, 1, placed.vdevice.memory_scope)
    moved = relax.TensorType(placed.shape, placed.dtype, elsewhere)
    assert not legalize_once._same(
        legalize_once._variables_only_signature(first, True),
        legalize_once._variables_only_signature(
            relax.Call(second.op, first.args, second.attrs, [moved]), True))
    assert legalize_once._same(
        legalize_once._variables_only_signature(first, True),
        legalize_once._variables_only_signature(
            relax.Call(second.op, first.args, second.attrs, second.ty_args), True))
