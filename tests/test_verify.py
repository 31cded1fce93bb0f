"""The checks themselves: they pass on texscope's output and fail on bad modules."""

import importlib

import numpy as np
import pytest
import tvm

import texscope
from conftest import ADRENO, TINY, conv_reads_pay, run_pass
from modules import annotated, rules
from texscope.knowledge import registry
from texscope.backend import upstream
from texscope.diagnostics import verify
from texscope.diagnostics.verify import check_invariants, equivalent, strip_scopes

MODULES = ["ConvRelu", "Residual", "Concat", "MaxPool", "Reductions", "Conflict",
           "BatchNorm", "SplitFields", "Depthwise", "PackedThenDepthwise"]


@pytest.mark.parametrize("name", MODULES)
def test_texscope_output_keeps_every_invariant_and_every_number(name):
    before = getattr(rules, name)
    after = run_pass(texscope.texture_scope_pipeline(ADRENO), before)
    assert check_invariants(after, ADRENO) == []
    comparison = equivalent(before, after)
    assert comparison.ok and comparison.outputs >= 1, comparison


def test_upstreams_one_dimensional_textures_are_violations():
    with ADRENO:
        theirs = upstream.annotate(ADRENO)(upstream.stage1()(rules.BatchNorm))
    messages = {(v.binding, v.message) for v in check_invariants(theirs, ADRENO)}
    assert ("mean", "cannot be a texture: shape [8] is not 5-D packed with inner axis 4") in messages


def test_a_texture_over_the_limits_is_a_violation():
    ours = run_pass(texscope.texture_scope_pipeline(ADRENO), rules.Seed)
    violations = check_invariants(ours, TINY)  # fine for Adreno, too wide for TINY
    # The packed input and the packed weights.
    assert sorted(v.binding for v in violations) == ["lv", "lv1"]
    # TINY: 64 texels a side, 16 layers; the input packs to (2, 16, 56, 56, 4),
    # which the Adreno plan put in global.texture-nhwc: 2 layers of 16 rows of
    # 56 x 56 texels.
    assert [v.message for v in violations if v.binding == "lv"] == [
        "cannot be a texture: global.texture-nhwc of 2 x 16 x 3136 texels exceeds the limits "
        "(spatial 64, depth 16)"]


def test_a_kernel_reading_a_texture_it_cannot_is_a_violation():
    mod = annotated.TextureAlsoReadDirectly
    gvar = mod.get_global_var("relu")
    broken = tvm.IRModule(
        {**dict(mod.functions), gvar: mod[gvar].with_attr("op_pattern", 8)},
        global_infos=mod.global_infos,
    )
    found = {(v.binding, v.message) for v in check_invariants(broken, ADRENO)}
    assert ("u", "opaque cannot read a texture (operand 0)") in found


def test_a_kernel_writing_a_texture_it_cannot_is_a_violation(monkeypatch):
    buffer_writer = texscope.OpSupport(
        name="buffer_writer", key=registry.PatternKey(0), inputs=(registry.ANY,),
        outputs=(registry.BUFFER,),
    )
    monkeypatch.setattr(registry, "_user_entries", [buffer_writer])
    found = {(v.binding, v.message)
             for v in check_invariants(annotated.TextureAlsoReadDirectly, ADRENO)}
    assert ("t", "buffer_writer cannot write a texture (output 0)") in found


def test_an_unlisted_vdevice_is_a_violation():
    mod = annotated.TextureOnlyCopied
    only_global = mod.global_infos["vdevice"][:1]
    broken = tvm.IRModule(mod.functions, global_infos={"vdevice": only_global})
    bindings = {v.binding for v in check_invariants(broken, ADRENO)
                if "not listed" in v.message}
    assert bindings == {"t"}


def test_different_computations_are_not_equivalent():
    after = run_pass(texscope.texture_scope_pipeline(ADRENO), rules.ConvRelu)
    assert not equivalent(rules.Softmax, after).ok  # same signature, other function


def test_strip_scopes_leaves_no_vdevice_or_copy():
    after = run_pass(texscope.texture_scope_pipeline(ADRENO), rules.Conflict)
    stripped = strip_scopes(after)
    text = stripped.script()
    assert "vdevice" not in text and "to_vdevice" not in text


def test_the_check_flag_turns_a_broken_plan_into_an_error(monkeypatch):
    stage3 = importlib.import_module("texscope.collect_producer")  # the name is also a function
    plan = stage3._optimal

    def read_textures_directly(consumers):
        # A broken planner: consumers that need a copy read the tensor as written.
        storages, reads = plan(consumers)
        return storages, [[storage] * len(read) for storage, read in zip(storages, reads)]

    monkeypatch.setattr(stage3, "_optimal", read_textures_directly)
    with pytest.raises(texscope.TexscopeError, match="invariant") as err:
        texscope.texture_scope_pipeline(ADRENO, check=True, profile=conv_reads_pay())(rules.Conflict)
    assert err.value.binding == "m" and "mean cannot read a texture" in str(err.value)


def test_random_inputs_are_valid_for_their_operators():
    x, w, gamma, beta, mean, var = verify.random_inputs(rules.BatchNorm)
    assert var.min() >= 0.5 and var.max() < 1.5  # positive: sqrt(var + eps) is real
    assert (gamma.min(), gamma.max()) >= (0.75, 0.75) and gamma.max() < 1.25
    assert abs(beta).max() <= 0.25 and abs(mean).max() <= 0.25
    # Uniform in [-b, b] has variance b**2 / 3 = 1 / fan-in: 8 channels x 3 x 3.
    assert abs(w).max() <= np.sqrt(3 / 72) and abs(x).max() <= 1
    (reference,) = verify.reference_outputs(rules.BatchNorm, [x, w, gamma, beta, mean, var])
    # Finite, and the relu leaves a good part of it non-zero: no channel is
    # a NaN turned into 0 on both sides.
    assert np.isfinite(reference).all()
    assert (reference > 0).any(axis=(0, 2, 3)).all()


def test_a_nan_in_the_reference_is_an_error_not_a_match():
    nan = np.array([1.0, np.nan], "float32")
    with pytest.raises(texscope.TexscopeError, match="reference output 0 holds NaN"):
        verify.compare([nan], [nan])
    with pytest.raises(texscope.TexscopeError, match="NaN or infinity"):
        verify.compare([np.ones(2, "float32")], [np.array([1, np.inf], "float32")])


def test_a_nan_in_the_output_is_a_mismatch():
    found = verify.compare([np.array([1.0, np.nan], "float32")], [np.ones(2, "float32")])
    assert (found.ok, found.max_abs_error) == (False, float("inf"))
    close = verify.compare([np.array([1.0, 2.00001], "float32")], [np.array([1.0, 2.0], "float32")])
    assert close.ok and 0 < close.max_abs_error < 2e-5


def test_a_tolerance_of_the_output_scale_admits_what_float32_reordering_moves():
    """pose_landmark_full's segmentation reaches 1315 and two float32 builds
    differ there by 0.14: absolute and relative tolerances call that a
    mismatch, a fraction of the output's largest magnitude does not; an
    error over that fraction still is one."""
    expected = [np.array([1000.0, 0.001], "float32")]
    moved = [np.array([1000.0, 0.051], "float32")]
    assert not verify.compare(moved, expected, rtol=1e-3, atol=1e-3).ok
    scaled = verify.compare(moved, expected, rtol=1e-3, atol=1e-3, of_scale=True)
    assert scaled.ok and scaled.max_scaled_error == pytest.approx(0.05 / 1000, rel=1e-3)
    wrong = [np.array([1000.0, 2.001], "float32")]
    assert not verify.compare(wrong, expected, rtol=1e-3, atol=1e-3, of_scale=True).ok


def test_a_kernel_reading_a_buffer_where_it_needs_a_texture_is_a_violation(monkeypatch):
    texture_reader = texscope.OpSupport(
        name="texture_reader", key=registry.PatternKey(registry.PATTERN_INJECTIVE),
        inputs=(registry.TEXTURE,), outputs=(registry.ANY,), sync=frozenset())
    monkeypatch.setattr(registry, "_user_entries", [texture_reader])
    found = {(v.binding, v.message)
             for v in check_invariants(annotated.TextureAlsoReadDirectly, ADRENO)}
    # x fits a texture, so a buffer is no fallback for it: t must read a texture.
    assert found == {("t", "texture_reader cannot read a buffer (operand 0)")}


def test_a_buffer_is_every_kernels_fallback_for_a_tensor_that_fits_no_texture(monkeypatch):
    texture_reader = texscope.OpSupport(
        name="texture_reader", key=registry.PatternKey(registry.PATTERN_INJECTIVE),
        inputs=(registry.TEXTURE,), outputs=(registry.ANY,), sync=frozenset())
    monkeypatch.setattr(registry, "_user_entries", [texture_reader])
    ours = run_pass(texscope.texture_scope_pipeline(ADRENO), rules.ConvRelu)
    # The packing kernels read x and w, 4-D: no texture can hold them.
    assert check_invariants(ours, ADRENO) == []


def test_a_kernel_breaking_its_sync_rule_is_a_violation(monkeypatch):
    synced = texscope.OpSupport(
        name="synced", key=registry.PatternKey(registry.PATTERN_INJECTIVE),
        inputs=(registry.ANY,), outputs=(registry.ANY,), sync=frozenset({"primary"}))
    monkeypatch.setattr(registry, "_user_entries", [synced])
    found = {(v.binding, v.message)
             for v in check_invariants(annotated.TextureAlsoReadDirectly, ADRENO)}
    # t reads a buffer and writes a texture, u the other way round.
    message = "synced must write its first output in the storage it reads its first input in"
    assert found == {("t", message), ("u", message)}


def test_returning_a_texture_is_a_violation():
    found = [(v.binding, v.message) for v in check_invariants(annotated.ReturnsTexture, ADRENO)]
    assert found == [("return", "returns a texture; a function returns buffers")]
