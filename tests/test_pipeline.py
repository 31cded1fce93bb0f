"""The whole texture-scope pipeline on one module per decision rule."""

import pytest
import tvm
from tvm import relax

import texscope
from conftest import ADRENO, TINY, VULKAN, conv_reads_pay, copies, run_pass, scopes, with_ty_args
from modules import expected, rules, texel_cases
from texscope.backend import upstream
from texscope.models import zoo
from texscope.convert_layout import LegalizeKeepingAttrs
from texscope.diagnostics.verify import strip_scopes

TW = "global.texture-weight"
G = "global"


def pipeline(mod, target=ADRENO):
    """The pipeline's output, checked to be stage 1's program exactly, with
    scopes added (and, where it copies, copies): every test of a scope map
    below compares the rest of the IR too."""
    out = run_pass(texscope.texture_scope_pipeline(target, check=True), mod)
    if not copies(out):
        stage1 = relax.transform.CanonicalizeBindings()(
            texscope.ConvertToPackedLayout(target)(mod))
        stripped = strip_scopes(out)
        tvm.ir.assert_structural_equal(
            tvm.IRModule(stripped.functions, global_infos=stripped.global_infos), stage1)
    return out


def test_seed_is_exactly_the_design():
    out = pipeline(rules.Seed)
    tvm.ir.assert_structural_equal(out, with_ty_args(expected.SeedExpected))


def test_conflicting_consumers_share_one_copy():
    out = run_pass(texscope.texture_scope_pipeline(ADRENO, check=True, profile=conv_reads_pay()),
                   rules.Conflict)
    tvm.ir.assert_structural_equal(out, with_ty_args(expected.ConflictExpected))
    assert copies(out) == ["c_global"]


def test_a_packed_conv_reads_a_buffer_rather_than_a_copy_of_it():
    # With the default prices a texture of c saves the conv's read less than
    # its copy for the reductions costs: the conv reads the buffer they read.
    out = pipeline(rules.Conflict)
    tvm.ir.assert_structural_equal(out, with_ty_args(expected.ConflictReadsBufferExpected))
    assert copies(out) == []


def test_conv_relu_reads_texture_and_unpacks_from_buffer():
    out = pipeline(rules.ConvRelu)
    assert scopes(out) == {
        "x": G, "w": G, "lv": TW, "lv1": TW, "c": TW, "lv2": G, "gv": G,
    }
    assert copies(out) == []


def test_residual_add_keeps_the_chain_in_texture():
    out = pipeline(rules.Residual)
    assert scopes(out) == {
        "x": G, "w1": G, "w2": G, "lv": TW, "lv1": TW, "c1": TW, "r1": TW,
        "lv2": TW, "c2": TW, "s": TW, "lv3": G, "gv": G,
    }
    assert copies(out) == []


def test_concat_reads_and_writes_texture():
    out = pipeline(rules.Concat)
    assert scopes(out) == {
        "x": G, "w1": G, "w2": G, "w3": G, "lv": TW, "lv1": TW, "a": TW, "lv2": TW,
        "lv3": TW, "b": TW, "ab": TW, "lv4": TW, "lv5": G, "gv": G,
    }
    assert copies(out) == []


def test_max_pool_reads_texture():
    out = pipeline(rules.MaxPool)
    assert scopes(out) == {"x": G, "w": G, "lv": TW, "lv1": TW, "c": TW, "lv2": G, "gv": G}


def test_reductions_read_buffers_so_the_conv_writes_one():
    out = pipeline(rules.Reductions)
    assert scopes(out)["c"] == G
    assert copies(out) == []


def test_softmax_reads_a_buffer():
    out = pipeline(rules.Softmax)
    assert scopes(out) == {"x": G, "w": G, "lv": TW, "lv1": TW, "c": G, "lv2": G, "gv": G}


def test_one_dimensional_params_are_never_textures_nor_copied():
    out = pipeline(rules.BatchNorm)
    params = {p.name: str(p.ty.vdevice.memory_scope) for p in out["main"].params}
    assert params == {"x": G, "w": G, "gamma": G, "beta": G, "mean": G, "var": G}
    # Relax names need not be unique (legalization makes a second "lv3"): check
    # every variable's own type rather than a map by name.
    variables = list(out["main"].params) + [b.var for b in out["main"].body.blocks[0].bindings]
    tensors = [v for v in variables if isinstance(v.ty, relax.TensorType)]
    for var in tensors:
        scope = str(var.ty.vdevice.memory_scope)
        assert scope == G or var.ty.ndim == 5, f"{var.name} {var.ty}"
    assert any(str(v.ty.vdevice.memory_scope) == TW for v in tensors)
    assert copies(out) == []


def test_limits_come_from_the_target():
    out = pipeline(rules.OverLimits, TINY)
    found = scopes(out)
    # (1, 2, 16, 16, 4) fits only as 2 layers of 16 x 16 texels under a 64 limit;
    assert found["lv"] == "global.texture"
    # (1, 2, 128, 128, 4) fits no flavour: it stays a buffer, and its conv reads it.
    assert found["lv2"] == G
    assert copies(out) == []


def test_packed_parameters_take_the_scope_their_consumers_need():
    annotate = tvm.transform.Sequential(
        [LegalizeKeepingAttrs(), texscope.AnnotateTextureScope(ADRENO)]
    )
    with ADRENO:
        out = run_pass(annotate, rules.PackedParams)
    found = scopes(out)
    assert found["x"] == TW  # a pool and an add read it: texture, no copy
    assert found["y"] == G  # only a reduction reads it
    assert copies(out) == []


def test_vulkan_target_makes_vulkan_vdevices():
    out = pipeline(rules.Seed, VULKAN)
    assert {str(v.target.kind.name) for v in out.global_infos["vdevice"]} == {"vulkan"}
    assert 'vdevice="vulkan:1:global.texture-nhwc"' in out.script()


def test_a_second_run_changes_nothing():
    once = pipeline(rules.Conflict)
    twice = run_pass(texscope.AnnotateTextureScope(ADRENO), once)
    tvm.ir.assert_structural_equal(once, twice)


def test_a_module_annotated_by_upstream_is_refused():
    stage1 = run_pass(texscope.ConvertToPackedLayout(ADRENO), rules.ConvRelu)
    theirs = upstream.annotate(ADRENO)(stage1)
    with pytest.raises(texscope.TexscopeError) as err:
        texscope.AnnotateTextureScope(ADRENO)(theirs)
    assert err.value.function == "main"
    assert err.value.binding is not None


@pytest.mark.parametrize("target", ["llvm", "cuda", {"kind": "opencl"}])
def test_a_target_without_textures_is_refused(target):
    with pytest.raises(texscope.TexscopeError, match="no GPU texture support"):
        texscope.texture_scope_pipeline(target)


def test_an_unknown_target_is_refused():
    with pytest.raises(texscope.TexscopeError, match="unknown target"):
        texscope.AnnotateTextureScope("no-such-gpu")


def test_a_function_without_dataflow_is_refused_naming_the_binding():
    with pytest.raises(texscope.TexscopeError) as err:
        texscope.texture_scope_pipeline(ADRENO)(rules.NoDataflow)
    assert (err.value.function, err.value.binding) == ("main", "y")


def test_a_tensor_without_shape_is_refused_naming_it():
    with pytest.raises(texscope.TexscopeError) as err:
        texscope.texture_scope_pipeline(ADRENO)(rules.NoShape)
    assert (err.value.function, err.value.binding) == ("main", "x")


@pytest.mark.parametrize("name", ["Conflict", "MaxPool", "Residual", "Concat", "BatchNorm",
                                  "PoolsBetweenConvs"])
def test_drop_in_on_upstreams_stage1_output_decides_the_same(name):
    # Upstream's stage 1 legalizes avg_pool2d: its PrimFunc is recognised by
    # the pool tag TOPI puts on its block, and writes a texture as ours does.
    module = getattr(rules, name, None) or getattr(texel_cases, name)
    ours = pipeline(module)
    with ADRENO:
        stage1 = upstream.stage1()(module)
    theirs = run_pass(texscope.AnnotateTextureScope(ADRENO), stage1)
    # Legalized layout transforms are recognised by what they do, Relax pools
    # are legalized first: scopes along the program order agree.
    def order(mod):
        return [
            str(b.var.ty.vdevice.memory_scope)
            for b in mod["main"].body.blocks[0].bindings
            if isinstance(b.var.ty, relax.TensorType)
        ]
    assert order(theirs) == order(ours)
    assert copies(theirs) == copies(ours)


def test_an_unpack_reads_a_texture_rather_than_a_copy_of_it():
    out = pipeline(texel_cases.UnpackShared)
    found = scopes(out)
    # c is a texture for the second conv; its unpack (lv3) reads it as it is,
    # d is only unpacked, so it is written as a buffer.
    assert (found["c"], found["d"], found["lv3"], found["lv4"]) == (TW, G, G, G)
    assert copies(out) == []


def test_each_field_of_a_split_gets_its_own_scope():
    out = pipeline(rules.SplitFields)
    (split,) = [b for b in out["main"].body.blocks[0].bindings if b.var.name == "parts"]
    assert [str(f.vdevice.memory_scope) for f in split.value.ty_args[0].fields] == [TW, G]
    assert copies(out) == []


def symbolic_scopes(out):
    """Scopes of the tensors whose shape is not static."""
    variables = list(out["main"].params) + [b.var for b in out["main"].body.blocks[0].bindings]
    return {v.name: str(v.ty.vdevice.memory_scope) for v in variables
            if isinstance(v.ty, relax.TensorType)
            and (v.ty.shape is None
                 or not all(isinstance(d, tvm.tirx.IntImm) for d in v.ty.shape.values))}


def test_symbolic_shapes_stay_buffers():
    out = pipeline(rules.Symbolic)
    found = symbolic_scopes(out)
    assert found and set(found.values()) == {G}
    # The static weight still packs into a texture for the conv.
    assert scopes(out)["lv1"] == TW


def test_a_shapeless_input_cast_to_a_symbolic_shape_is_fine():
    out = pipeline(rules.MatchCast)
    found = symbolic_scopes(out)
    assert found and set(found.values()) == {G}
    assert out["main"].params[0].ty.ndim == 4  # annotated, not loosened


def test_an_empty_function_is_annotated():
    out = pipeline(rules.Empty)
    assert scopes(out) == {"x": G}


def test_an_unknown_kernel_reads_and_writes_buffers():
    out = pipeline(rules.UnknownOp)
    found = scopes(out)
    assert found["c"] == G and found["e"] == G
    assert copies(out) == []


def test_a_module_without_relax_functions_is_refused():
    with pytest.raises(texscope.TexscopeError, match="no Relax function"):
        texscope.AnnotateTextureScope(ADRENO)(tvm.IRModule({}))


def test_a_private_relax_callee_is_inlined_and_annotated():
    annotate = tvm.transform.Sequential(
        [LegalizeKeepingAttrs(), texscope.AnnotateTextureScope(ADRENO, check=True)]
    )
    with ADRENO:
        out = run_pass(annotate, rules.TwoFunctions)
    assert [g.name_hint for g in out.functions if isinstance(out[g], relax.Function)] == ["main"]
    # Inlining repeats the name gv: look at the bindings in order.
    found = [(b.var.name, str(b.var.ty.vdevice.memory_scope))
             for b in out["main"].body.blocks[0].bindings]
    # The relu, the inlined conv and relu write textures; the pool a buffer.
    assert found == [("a", TW), ("c", TW), ("gv", TW), ("gv", G)]
    assert copies(out) == []


def test_a_call_into_a_public_relax_function_is_refused_naming_it():
    with pytest.raises(texscope.TexscopeError, match="make it private") as err:
        texscope.texture_scope_pipeline(ADRENO)(rules.PublicCallee)
    assert (err.value.function, err.value.binding) == ("main", "b")


def test_an_rgb_stem_is_padded_and_reads_texture():
    before = zoo.resnet_style(blocks=1, image=16)
    out = pipeline(before)
    convs = [b.value for b in out["main"].body.blocks[0].bindings
             if isinstance(b.value, relax.Call) and b.value.op.name == "relax.nn.conv2d"]
    assert all("texture" in str(c.args[0].ty.vdevice.memory_scope) for c in convs)
    from texscope.diagnostics.verify import equivalent

    assert equivalent(before, out).ok


def test_a_layout_conversion_failing_inside_tvm_is_named_and_keeps_its_cause():
    with pytest.raises(texscope.TexscopeError,
                       match="packing layouts failed inside TVM's ConvertLayout") as err:
        texscope.ConvertToPackedLayout(ADRENO)(rules.AlreadyPacked)
    # TVM's whole message and its error type, which is all that crosses the
    # pass infrastructure (a chained cause does not); before, only the last
    # line of the message was kept.
    assert str(err.value).endswith(
        "(InternalError: Check failed: (src.ndim() == dst.ndim() && input.ndim() == "
        "src.ndim()) is false: Layouts must have the same size)")


def test_only_what_tvm_raises_for_a_bad_target_is_an_unknown_target(monkeypatch):
    with pytest.raises(texscope.TexscopeError, match="unknown target") as err:
        texscope.texture_target({"kind": "opencl", "texture_spatial_limit": "wide"})
    assert isinstance(err.value.__cause__, ValueError)

    class Broken(tvm.target.Target):  # pylint: disable=too-few-public-methods
        def __init__(self, _spec):  # pylint: disable=super-init-not-called
            raise KeyError("a bug, not a bad target")

    # A bug inside target creation is not the user's unknown target.
    monkeypatch.setattr(tvm.target, "Target", Broken)
    with pytest.raises(KeyError):
        texscope.texture_target("adreno-opencl")
