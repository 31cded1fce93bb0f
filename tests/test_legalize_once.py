"""Legalizing each signature once leaves the module legalizing every call makes."""

import tvm
import tvm_ffi
from tvm import relax

import texscope
from conftest import run_pass
from modules import legalize_once as cases
from texscope import convert_layout
from texscope.models import zoo
from texscope.rewrites import legalize
from texscope.rewrites.legalize_once import once_per_signature


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


def _variables_only(legalization):
    """What stage 1 did before: a call of variables only calls the PrimFunc of
    an earlier one with the same attributes and types; every other call is
    legalized anew."""
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
    # Seven calls add a kernel and record it; h calls g's, recorded already.
    assert len(updates) == 7
    assert all(func.attrs["texscope_op"]["op"] in ("relax.add", "relax.maximum")
               for gvar, func in out.functions.items() if gvar.name_hint != "main")
