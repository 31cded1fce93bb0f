"""Modules whose constant weights fold, as imported models' do.

Values are random (scaled by 1/sqrt(fan-in)) plus the edges of a float16
cast: overflow, subnormals, ties, signed zero, infinities and NaN.
"""

import numpy as np
import tvm
from tvm import relax, tirx
from tvm.relax import op as O
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

RNG = np.random.default_rng(14)
FP16_EDGES = np.array([7e4, -7e4, 6e-8, 3e-5, 1.0 + 2.0 ** -11, -0.0, np.inf, -np.inf, np.nan,
                       65519.0, 2.0 ** -25], "float32")


def _weights(shape, dtype="float16", edges=False):
    fan_in = int(np.prod(shape[1:])) or 1
    values = RNG.standard_normal(shape).astype("float32") / np.sqrt(fan_in)
    if edges:
        flat = values.reshape(-1)
        flat[: FP16_EDGES.size] = FP16_EDGES[: flat.size]
    with np.errstate(over="ignore"):  # the overflow edges become infinities
        return values.astype(dtype)


def _function(inputs, body) -> tvm.IRModule:
    bb = relax.BlockBuilder()
    with bb.function("main", inputs):
        with bb.dataflow():
            out = bb.emit_output(body(bb, *inputs))
        bb.emit_func_output(out)
    return bb.get()


def _tflite_style_conv() -> tvm.IRModule:
    """An NHWC conv as the TFLite importer writes it: float16 weights cast
    to float32, transposed OHWI -> HWIO, then a depthwise conv (reshaped
    weights) and a bias; 3 input and 6 output channels, so packing pads."""
    x = relax.Var("x", relax.TensorType((1, 8, 8, 3), "float32"))

    def body(bb, x):
        w = bb.emit(O.astype(relax.const(_weights((6, 3, 3, 3), edges=True)), "float32"))
        w = bb.emit(O.permute_dims(w, [1, 2, 3, 0]))
        y = bb.emit(O.nn.conv2d(x, w, padding=1, data_layout="NHWC", kernel_layout="HWIO"))
        b = bb.emit(O.astype(relax.const(_weights((6,))), "float32"))
        y = bb.emit(O.add(y, b))
        dw = bb.emit(O.astype(relax.const(_weights((1, 3, 3, 6))), "float32"))
        dw = bb.emit(O.reshape(dw, (3, 3, 6, 1)))
        return O.nn.conv2d(y, dw, padding=1, groups=6, data_layout="NHWC", kernel_layout="HWOI")

    return _function([x], body)


def _batch_norm_constants() -> tvm.IRModule:
    """Inference batch norm whose statistics are constants (decomposed into
    arithmetic on them), then reshapes of constant tensors."""
    x = relax.Var("x", relax.TensorType((1, 8, 4, 4), "float32"))

    def body(bb, x):
        gamma, beta, mean = (relax.const(1 + 0.1 * _weights((8,), "float32")) for _ in range(3))
        var = relax.const(RNG.uniform(0.5, 1.5, 8).astype("float32"))
        y = bb.emit(O.nn.batch_norm(x, gamma, beta, mean, var, axis=1)[0])
        # Through float16 and back: the cast's edges, rounded as LLVM rounds them.
        halves = O.astype(relax.const(_weights((8,), "float32", edges=True)), "float16")
        scale = bb.emit(O.expand_dims(O.astype(halves, "float32"), [0, 2, 3]))
        shift = bb.emit(O.negative(O.divide(scale, relax.const(np.float32(3.0)))))
        flat = bb.emit(O.squeeze(shift, [0]))
        y = bb.emit(O.multiply(y, scale))
        return O.add(y, O.reshape(flat, (1, 8, 1, 1)))

    return _function([x], body)


def _packed_weights() -> tvm.IRModule:
    """OIHW weights packed to OIHW4o by index maps, 6 output channels padded
    to 8 (one pad value default, one given), and an NCHW4c bias."""
    x = relax.Var("x", relax.TensorType((1, 2, 4, 4, 4), "float32"))
    pack = tirx.IndexMap.from_func(lambda o, i, h, w: (o // 4, i, h, w, o % 4))

    def body(bb, x):
        w = relax.const(_weights((6, 8, 3, 3), "float32", edges=True))
        w4 = bb.emit(O.layout_transform(w, pack))
        w4b = bb.emit(O.layout_transform(w, pack, pad_value=1.5))
        y = bb.emit(O.nn.conv2d(x, w4, data_layout="NCHW4c", kernel_layout="OIHW4o",
                                out_layout="NCHW4c", padding=1))
        z = bb.emit(O.nn.conv2d(x, w4b, data_layout="NCHW4c", kernel_layout="OIHW4o",
                                out_layout="NCHW4c", padding=1))
        return O.add(y, z)

    return _function([x], body)


def _needs_a_build() -> tvm.IRModule:
    """Operators numpy does not fold here (a concat, a slice, a float-to-int
    cast, a broadcast_to), a numpy fold fed by one of them, and a constant
    reshaped through a shape bound to a variable."""
    x = relax.Var("x", relax.TensorType((4, 6), "float32"))

    def body(bb, x):
        a, b = relax.const(_weights((2, 6), "float32")), relax.const(_weights((2, 6), "float32"))
        joined = bb.emit(O.concat([a, b], axis=0))
        cut = bb.emit(O.strided_slice(joined, axes=[1], begin=[1], end=[5]))
        halves = bb.emit(O.astype(O.multiply(cut, relax.const(np.float32(40.0))), "int32"))
        shape = bb.emit(relax.ShapeExpr([4, 4]))
        grown = bb.emit(O.broadcast_to(relax.const(np.float32(0.5)), shape))
        as_float = bb.emit(O.astype(halves, "float32"))
        y = bb.emit(O.add(O.strided_slice(x, axes=[1], begin=[0], end=[4]), as_float))
        return O.add(y, grown)

    return _function([x], body)


@I.ir_module
class CallTIRWithConstants:
    """A kernel called on a constant: the call itself folds."""

    @T.prim_func(private=True, s_tir=True)
    def double(a: T.Buffer((4,), "float32"), b: T.Buffer((4,), "float32")):
        for i in range(4):
            with T.sblock("b"):
                vi = T.axis.spatial(4, i)
                b[vi] = a[vi] * T.float32(2)

    @R.function
    def main(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        cls = CallTIRWithConstants
        with R.dataflow():
            c = R.call_tir(cls.double, (R.const(np.arange(4, dtype="float32")),),
                           out_ty=R.Tensor((4,), "float32"))
            d = R.astype(c, "float16")
            gv = R.add(x, R.astype(d, "float32"))
            R.output(gv)
        return gv


def _conv_of_constant_weights() -> tvm.IRModule:
    """A conv of constant weights and a relu: maps and a weight to place
    (the planner sees the weight as a constant, as in any imported model)."""
    x = relax.Var("x", relax.TensorType((1, 8, 16, 16), "float32"))

    def body(bb, x):
        y = bb.emit(O.nn.conv2d(x, relax.const(_weights((8, 8, 1, 1), "float32"))))
        return O.nn.relu(y)

    return _function([x], body)


TFLITE_STYLE_CONV = _tflite_style_conv()
CONV_OF_CONSTANT_WEIGHTS = _conv_of_constant_weights()
BATCH_NORM_CONSTANTS = _batch_norm_constants()
PACKED_WEIGHTS = _packed_weights()
NEEDS_A_BUILD = _needs_a_build()
