"""texscope's constant folding gives exactly Relax's FoldConstant module."""

import numpy as np
import pytest
import tvm
from tvm import relax

from conftest import ADRENO, run_pass
from modules import constant_folding as cf
from modules import folding
from texscope.knowledge import registry
from texscope.models import zoo
from texscope.convert_layout import FoldConstantsIfAny
from texscope.rewrites import constant_eval, fold_constants
from texscope.rewrites.fold_constants import FoldConstants
from texscope.rewrites.pad_channels import PadChannels


def packed(mod):
    """Stage 1 up to folding: channel padding, then NCHW4c/OIHW4o packing."""
    with ADRENO:
        return tvm.transform.Sequential([
            relax.transform.DecomposeOpsForInference(), PadChannels(),
            relax.transform.ConvertLayout({}, registry.desired_layouts),
            relax.transform.Normalize(),
        ])(mod)


MODULES = {
    "tflite_style_conv": lambda: packed(cf.TFLITE_STYLE_CONV),
    "batch_norm_constants": lambda: packed(cf.BATCH_NORM_CONSTANTS),
    "packed_weights": lambda: cf.PACKED_WEIGHTS,
    "needs_a_build": lambda: cf.NEEDS_A_BUILD,
    "call_tir_with_constants": lambda: cf.CallTIRWithConstants,
    "constant_scale": lambda: folding.ConstantScale,
    "loosely_typed_constant": lambda: folding.LooselyTypedConstant,
}


def constant_calls(mod):
    """Operator calls in main whose arguments are all constants."""
    return [b.var.name for block in mod["main"].body.blocks for b in block.bindings
            if isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.Op)
            and not any(isinstance(a, relax.Var) for a in b.value.args)]


@pytest.fixture
def llvm_builds(monkeypatch):
    """Counts LLVM builds of folded kernels."""
    builds = []
    real = tvm.tirx.build

    def counting(mod, *args, **kwargs):
        builds.append(len(mod.functions))
        return real(mod, *args, **kwargs)

    monkeypatch.setattr(tvm.tirx, "build", counting)
    return builds


@pytest.mark.parametrize("name", sorted(MODULES))
def test_folding_equals_relax_fold_constant_bit_for_bit(name):
    mod = MODULES[name]()
    assert constant_calls(mod), "the module must have something to fold"
    ours = run_pass(FoldConstants, mod)
    tvm.ir.assert_structural_equal(ours, relax.transform.FoldConstant()(mod))
    assert constant_calls(ours) == []


@pytest.mark.parametrize("name", ["tflite_style_conv", "batch_norm_constants"])
def test_packed_weights_fold_without_inferring_types_anew(monkeypatch, name):
    # Each folded weight's variable had its constant's type: the types around
    # its uses stay as they were, so no call is re-typed.
    def refuse(*args):
        raise AssertionError("a function was rewritten by the type-inferring mutator")

    monkeypatch.setattr(fold_constants, "_Rewrite", refuse)
    mod = MODULES[name]()
    ours = run_pass(FoldConstants, mod)
    tvm.ir.assert_structural_equal(ours, relax.transform.FoldConstant()(mod))


def test_packing_walks_each_layout_map_once_per_shape():
    # A ResNet's batch-norm vectors and weights: 45 packings, 3 maps and shapes.
    mod = packed(zoo.with_constant_weights(zoo.NETWORKS["resnet"]()))
    constant_eval._scatter_targets.cache_clear()
    assert constant_calls(run_pass(FoldConstants, mod)) == []
    packings = constant_eval._scatter_targets.cache_info()
    assert (packings.hits, packings.misses) == (42, 3)


def test_structural_equality_sees_one_ulp_in_a_constant():
    """What makes the test above bit-exact: a constant one ulp off differs."""
    values = np.linspace(-1, 1, 8, dtype="float32")
    nudged = values.copy()
    nudged[3] = np.nextafter(nudged[3], np.float32(2))
    with pytest.raises(ValueError):
        tvm.ir.assert_structural_equal(relax.const(values), relax.const(nudged))


def test_weights_fold_in_numpy_without_any_llvm_build(llvm_builds):
    for mod in (packed(cf.TFLITE_STYLE_CONV), packed(cf.BATCH_NORM_CONSTANTS), cf.PACKED_WEIGHTS):
        folded = FoldConstants(mod)
        assert not constant_calls(folded)
    assert llvm_builds == []


def test_what_numpy_cannot_fold_is_built_once_per_round(llvm_builds):
    folded = FoldConstants(cf.NEEDS_A_BUILD)
    # Round 1: concat and broadcast_to in one build; round 2: the slice of
    # the concat; round 3: the float-to-int cast.  The int-to-float cast
    # after it folds in numpy.
    assert llvm_builds == [2, 1, 1]
    assert constant_calls(folded) == []


def test_nothing_to_fold_leaves_the_module_alone():
    assert run_pass(FoldConstantsIfAny, folding.NothingToFold).same_as(folding.NothingToFold)
