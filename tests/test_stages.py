"""Each stage alone, its results compared field by field."""

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax

import texscope
from conftest import ADRENO, conv_reads_pay, run_pass
from modules import annotated, folding, rules
from texscope.cleanup import Cleanup
from texscope.convert_layout import FoldConstantsIfAny, merge_identical_prim_funcs
from texscope.collect_consumer import RETURN
from texscope.knowledge import registry
from texscope.knowledge.registry import ANY, BUFFER, TEXTURE, Storage

TW = "global.texture-weight"


def stage1(mod):
    return run_pass(texscope.ConvertToPackedLayout(ADRENO), mod)


def consumers(mod, profile=None):
    return texscope.collect_consumer(mod, "main", texscope.texture_target(ADRENO, profile))


def op_calls(mod, op_name):
    return [b for b in mod["main"].body.blocks[0].bindings
            if isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.Op)
            and b.value.op.name == op_name]


def test_stage1_packs_conv2d_and_records_attributes_of_legalized_ops():
    mod = stage1(rules.Conflict)
    conv = [b.value for b in op_calls(mod, "relax.nn.conv2d")]
    assert [(c.attrs.data_layout, c.attrs.kernel_layout) for c in conv] == [("NCHW4c", "OIHW4o")] * 2
    records = {gv.name_hint: dict(f.attrs["texscope_op"]) for gv, f in mod.functions.items()
               if isinstance(f, tvm.tirx.PrimFunc) and "texscope_op" in f.attrs}
    assert records["te_layout_transform"] == {"op": "relax.layout_transform"}
    pooled = run_pass(texscope.ConvertToPackedLayout(ADRENO), rules.MaxPool)
    pool = pooled[pooled.get_global_var("max_pool2d")]
    # The registry recognises pools by TOPI's block tag, not by a record.
    assert "texscope_op" not in pool.attrs
    assert registry.schedule_rules(pool) == {"meta_schedule.pool_max"}
    assert all("op_pattern" in f.attrs for f in mod.functions.values()
               if isinstance(f, tvm.tirx.PrimFunc))


def test_collect_consumer_lists_every_demand():
    info = consumers(stage1(rules.Conflict))
    fields = [(d.consumer, d.operand, d.accepts, d.wants, d.entry) for d in info.of("c")]
    assert fields == [
        ("p", 0, ANY, Storage.TEXTURE, "pointwise_conv2d_nchw4c"),
        ("m", 0, BUFFER, Storage.BUFFER, "mean"),
        ("s", 0, BUFFER, Storage.BUFFER, "sum"),
    ]
    # The unpacking transform reads either, a buffer by choice (a texture read
    # saves it nothing); the function's result goes back as a buffer.
    assert [(d.consumer, d.accepts, d.wants) for d in info.of("p")] == [
        ("lv3", ANY, Storage.BUFFER)]
    assert [(d.consumer, d.accepts) for d in info.of("lv3")] == [(RETURN, BUFFER)]
    # The packed input feeds conv2d's data operand, the packed weights its kernel
    # operand: both read either storage and gain from a texture.
    assert [(d.consumer, d.operand, d.accepts, d.wants) for d in info.of("lv")] == [
        ("c", 0, ANY, Storage.TEXTURE)]
    assert [(d.consumer, d.operand, d.accepts, d.wants) for d in info.of("lv1")] == [
        ("c", 1, ANY, Storage.TEXTURE)]


def test_collect_consumer_falls_back_to_buffer_when_a_tensor_cannot_be_a_texture():
    mod = stage1(rules.ConvRelu)
    info = consumers(mod)
    (demand,) = info.of("x")  # 4-D: never a texture
    assert demand.accepts == BUFFER
    relu_input = info.of("c")
    assert [d.accepts for d in relu_input] == [ANY]


def test_collect_producer_reads_a_buffer_where_a_texture_would_need_a_copy():
    # The default prices: the conv's texture read of c saves 8 KiB, a copy for
    # the reductions would cost 8 KiB and a launch.
    info = texscope.collect_producer(consumers(stage1(rules.Conflict)))
    c = info.of("c")
    assert (c.storage, c.scope, c.copied_to, c.copy_bytes) == (Storage.BUFFER, "global", (), 0)
    assert c.reason == "buffer; read directly by p, m, s"
    assert info.copies == 0
    calls = {site.name: site.index for site in info.graph.calls}
    assert info.reads[calls["p"]] == ("global", TW)


def test_collect_producer_settles_the_conflict():
    info = texscope.collect_producer(consumers(stage1(rules.Conflict), conv_reads_pay()))
    c = info.of("c")
    assert (c.storage, c.scope, c.copied_to, c.copied_for) == (
        Storage.TEXTURE, TW, ("global",), ("m", "s"),
    )
    assert c.copy_bytes == 1 * 2 * 16 * 16 * 4 * 4
    # Only the optimal planner weighs the copy against the texture reads, and
    # says so only where it paid for one.
    assert c.reason == ("texture; read directly by p; copied to buffer for m, s; "
                        "the texture reads save more than the copy costs")
    assert info.of("lv").reason == "texture; read directly by c"
    # The local rule weighs no prices: fewest copies first, so no copy now that
    # the conv may read a buffer.
    local = texscope.collect_producer(consumers(stage1(rules.Conflict), conv_reads_pay()), "local")
    assert local.of("c").reason == "buffer; read directly by p, m, s"
    assert info.of("lv1").scope == TW and info.of("lv1").copied_to == ()
    assert info.copies == 1
    calls = {site.name: site.index for site in info.graph.calls}
    assert info.reads[calls["p"]] == (TW, TW)
    assert info.reads[calls["m"]] == ("global",)
    assert info.reads[calls["c"]] == (TW, TW)


def test_define_vdevice_reads_every_tensor_in_its_planned_scope_and_types_every_call():
    mod = stage1(rules.Conflict)
    texture = texscope.texture_target(ADRENO, conv_reads_pay())
    plan = texscope.collect_producer(consumers(mod, conv_reads_pay()))
    out = texscope.define_vdevice(mod, {"main": plan}, texture)
    relax.analysis.well_formed(out)
    assert [str(v.memory_scope) for v in out.global_infos["vdevice"]] == ["global", TW]
    assert op_calls(out, "relax.hint_on_device") == []  # copies are written directly
    copies = op_calls(out, "relax.to_vdevice")
    calls = [b for b in out["main"].body.blocks[0].bindings
             if isinstance(b.value, relax.Call) and b.value.op.name != "relax.to_vdevice"]
    for binding, reads in zip(calls, plan.reads):
        call = binding.value
        inputs = call.args[1].fields if call.op.name == "relax.call_tir" else call.args
        tensors = [a for a in inputs if isinstance(a.ty, relax.TensorType)]
        for arg, scope in zip(tensors, reads):
            assert scope is None or str(arg.ty.vdevice.memory_scope) == scope, binding.var.name
        (ty,) = call.ty_args
        assert ty.vdevice is not None, binding.var.name
    # c is written in one scope and read in both: one copy, shared by its readers.
    (c_copy,) = [b for b in copies if b.var.name.startswith("c_")]
    written = c_copy.value.args[0].ty.vdevice.memory_scope
    assert sorted([str(written), str(c_copy.value.attrs.dst_vdevice.memory_scope)]) == ["global", TW]
    assert str(c_copy.var.ty.vdevice.memory_scope) != str(written)


def test_cleanup_folds_a_texture_only_ever_copied_to_a_buffer():
    out = run_pass(Cleanup(), annotated.TextureOnlyCopied)
    tvm.ir.assert_structural_equal(out, annotated.TextureOnlyCopiedFolded)


def test_cleanup_keeps_a_copy_when_the_texture_has_other_readers():
    out = run_pass(Cleanup(), annotated.TextureAlsoReadDirectly)
    tvm.ir.assert_structural_equal(out, annotated.TextureAlsoReadDirectly)


def test_cleanup_counts_uses_only_where_a_copy_to_a_buffer_may_fold(monkeypatch):
    from texscope import cleanup

    counted = []
    use_counts = cleanup._use_counts
    monkeypatch.setattr(cleanup, "_use_counts",
                        lambda mod, gvar: counted.append(gvar) or use_counts(mod, gvar))
    # Without any copy the function is left as it is, without the walk.
    assert run_pass(cleanup.FoldTextureCopies(), annotated.ReturnsTexture) \
        .same_as(annotated.ReturnsTexture)
    assert counted == []
    out = run_pass(cleanup.FoldTextureCopies(), annotated.TextureOnlyCopied)
    tvm.ir.assert_structural_equal(out, annotated.TextureOnlyCopiedFolded)
    assert len(counted) == 1


def test_stage1_folds_constants_only_where_something_folds():
    folded = run_pass(FoldConstantsIfAny, folding.ConstantScale)
    (product,) = folded["main"].body.blocks[0].bindings  # the sum became a constant
    assert product.value.op.name == "relax.multiply"
    total = product.value.args[1]
    assert isinstance(total, tvm.ir.expr.Constant)
    np.testing.assert_array_equal(total.value.numpy(), 2 * folding.SCALE)
    # A constant next to a variable folds nothing: FoldConstant is not run.
    assert run_pass(FoldConstantsIfAny, folding.NothingToFold).same_as(folding.NothingToFold)


def test_cleanup_keeps_a_copy_when_the_producer_writes_only_textures(monkeypatch):
    # Folding the copy would make relu write the buffer itself: only a
    # producer whose kernel writes buffers may (TextureOnlyCopied's relu is
    # injective; here injective kernels write only textures).
    texture_writer = texscope.OpSupport(
        name="texture_writer", key=registry.PatternKey(registry.PATTERN_INJECTIVE),
        inputs=(ANY,), outputs=(TEXTURE,))
    monkeypatch.setattr(registry, "_user_entries", [texture_writer])
    out = run_pass(Cleanup(), annotated.TextureOnlyCopied)
    tvm.ir.assert_structural_equal(out, annotated.TextureOnlyCopied)


def test_stage1_builds_each_distinct_kernel_once():
    # Batch norm's four parameters pack through identical layout transforms.
    mod = stage1(rules.BatchNorm)
    kernels = [f for f in mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    assert all(not tvm_ffi.structural_equal(a, b)
               for i, a in enumerate(kernels) for b in kernels[i + 1:])
    callees = [b.value.args[0] for b in mod["main"].body.blocks[0].bindings
               if isinstance(b.value, relax.Call) and b.value.op.name == "relax.call_tir"]
    # Every call goes to a kernel of the module, and some kernel serves several.
    assert all(callee in mod.functions for callee in callees)
    assert len(set(callees)) < len(callees)


@pytest.mark.parametrize("gain, wants", [(0.0, Storage.TEXTURE), (-0.125, Storage.BUFFER)])
def test_a_reader_of_either_wants_a_texture_unless_reading_one_costs(monkeypatch, gain, wants):
    either = texscope.OpSupport(
        name="either", key=registry.PatternKey(registry.PATTERN_INJECTIVE),
        inputs=(ANY,), outputs=(ANY,), texture_gain=gain, sync=frozenset())
    monkeypatch.setattr(registry, "_user_entries", [either])
    # ConvRelu's relu reads the conv's output c, which fits a texture; a
    # texture read that saves nothing still wants one (the local policy's
    # preference), one that costs wants a buffer.
    (demand,) = consumers(stage1(rules.ConvRelu)).of("c")
    assert (demand.entry, demand.accepts, demand.wants) == ("either", ANY, wants)


def test_identical_kernels_merge_into_the_first_by_name():
    merged = merge_identical_prim_funcs(annotated.TwinKernels)
    tvm.ir.assert_structural_equal(merged, annotated.TwinKernelsMerged)
    # Kernels the module had before a legalization are not compared.
    assert merge_identical_prim_funcs(annotated.TwinKernels, before=annotated.TwinKernels) \
        is annotated.TwinKernels


def test_of_twins_the_kernel_named_first_is_kept():
    merged = merge_identical_prim_funcs(annotated.TwinKernelsPastNine)
    assert sorted(g.name_hint for g in merged.functions) == ["main", "relu9"]
    assert "cls.relu9, (a,)" in merged.script()
