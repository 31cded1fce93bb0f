"""Constant folding in stage 1: done where something folds, skipped otherwise."""

import numpy as np
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

SCALE = np.full((1, 8, 1, 1), 2.0, "float32")


def _with_constant_scale() -> "I.IRModule":
    """x * (scale + scale), both scales constants: the sum folds."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8, 4, 4), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            total = bb.emit(relax.op.add(relax.const(SCALE), relax.const(SCALE)))
            out = bb.emit_output(relax.op.multiply(x, total))
        bb.emit_func_output(out)
    return bb.get()


ConstantScale = _with_constant_scale()


@I.ir_module
class NothingToFold:
    @R.function
    def main(x: R.Tensor((1, 8, 4, 4), "float32"), s: R.Tensor((1, 8, 1, 1), "float32")):
        with R.dataflow():
            t = R.add(s, R.const(1.0, "float32"))
            gv = R.multiply(x, t)
            R.output(gv)
        return gv


def _with_loosely_typed_constant() -> "I.IRModule":
    """x * (scale + scale) where the sum's variable is typed with no shape:
    once it is the constant, the product's type is inferred anew (it gets
    the shape)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8, 4, 4), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            total = bb.normalize(relax.op.add(relax.const(SCALE), relax.const(SCALE)))
            loose = relax.DataflowVar("total", relax.TensorType(dtype="float32", ndim=4))
            bb.emit_normalized(relax.VarBinding(loose, total))
            out = bb.emit_output(relax.op.multiply(x, loose))
        bb.emit_func_output(out)
    return bb.get()


LooselyTypedConstant = _with_loosely_typed_constant()
