"""rewrite_bindings: a binding's value replaced in place, nested calls bound
in evaluation order, what is no longer used dropped."""

import pytest
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from texscope.errors import TexscopeError
from texscope.ir.graph import handle, new_call, new_tensor_type, read_after_block
from texscope.ir.rebuild import bound_call, rewrite_bindings

_RELU = tvm.ir.Op.get("relax.nn.relu")
_ADD = tvm.ir.Op.get("relax.add")


@I.ir_module
class ReluThenAdd:
    @R.function
    def main(x: R.Tensor((1, 8), "float32"), a: R.Tensor((1, 8), "float32")):
        with R.dataflow():
            y = R.nn.relu(x)
            gv = R.add(y, a)
            R.output(gv)
        return gv


@I.ir_module
class LeakyAdd:
    @R.function
    def main(x: R.Tensor((1, 8), "float32"), a: R.Tensor((1, 8), "float32")):
        with R.dataflow():
            lv = R.maximum(x, R.const(0.0, "float32"))
            lv1 = R.minimum(x, R.const(0.0, "float32"))
            lv2 = R.multiply(lv1, a)
            gv = R.add(lv, lv2)
            R.output(gv)
        return gv


def _leaky_add(value, bound):
    """add(relu(x), a) -> max(x, 0) + min(x, 0) * a: the relu is found
    through its variable, and the replacement nests three calls."""
    add = bound_call(value, _ADD, bound)
    relu = None if add is None else bound_call(add.args[0], _RELU, bound)
    if relu is None:
        return None
    (x,), zero = relu.args, relax.const(0.0, "float32")
    return relax.op.add(relax.op.maximum(x, zero),
                        relax.op.multiply(relax.op.minimum(x, zero), add.args[1]))


def test_nested_calls_are_bound_left_to_right_and_unused_bindings_dropped():
    before = ReluThenAdd.script()
    out = rewrite_bindings(ReluThenAdd, _leaky_add)
    tvm.ir.assert_structural_equal(out, LeakyAdd)
    assert ReluThenAdd.script() == before


def test_a_function_with_nothing_to_rewrite_is_left_as_it_is():
    tvm.ir.assert_structural_equal(rewrite_bindings(LeakyAdd, _leaky_add), LeakyAdd)


def test_a_rewrite_that_changes_a_bindings_type_is_an_error_naming_it():
    def widen(value, _bound):
        if isinstance(value, relax.Call) and value.op.same_as(_RELU):
            return relax.op.concat([value.args[0], value.args[0]], axis=1)
        return None

    with pytest.raises(TexscopeError, match=r"^function main, binding y: a rewrite changed its "
                       r"type from R.Tensor\(\(1, 8\), dtype=\"float32\"\) to R.Tensor\(\(1, 16\)"):
        rewrite_bindings(ReluThenAdd, widen)



def test_new_call_is_the_call_relax_call_makes():
    x = relax.Var("x", relax.TensorType((1, 8), "float32"))
    ty = relax.TensorType((1, 8), "float32")
    tvm.ir.assert_structural_equal(new_call(_ADD, [x, x]), relax.Call(_ADD, [x, x]))
    typed = new_call(_RELU, (x,), None, [ty], ty=ty)
    tvm.ir.assert_structural_equal(typed, relax.Call(_RELU, [x], None, [ty], ret_ty=ty))
    assert typed.ty.same_as(ty) and typed.args[0].same_as(x)


def test_new_tensor_type_is_the_type_relax_tensor_type_makes():
    texture = relax.VDevice("opencl", 0, "global.texture")
    shaped = relax.TensorType((1, 8), "float16")
    tvm.ir.assert_structural_equal(new_tensor_type(shaped.shape, shaped.dtype, texture),
                                   relax.TensorType(shaped.shape, "float16", texture))
    unshaped = new_tensor_type(None, shaped.dtype, None, ndim=3)
    tvm.ir.assert_structural_equal(unshaped, relax.TensorType(None, "float16", ndim=3))
    assert unshaped.ndim == 3 and unshaped.vdevice is None


@I.ir_module
class TwoBlocks:
    @R.function
    def main(x: R.Tensor((1, 8), "float32")):
        with R.dataflow():
            y = R.nn.relu(x)
            z = R.add(y, x)
            R.output(y, z)
        w = R.add(y, y)
        return (w, x)


def test_read_after_block_names_what_later_blocks_and_the_result_read():
    func = TwoBlocks["main"]
    variables = [*func.params, *(b.var for block in func.body.blocks for b in block.bindings)]
    names = {handle(var): var.name for var in variables}
    assert sorted(names[key] for key in read_after_block(func, 0)) == ["w", "x", "y"]
    assert sorted(names[key] for key in read_after_block(func, 1)) == ["w", "x"]
