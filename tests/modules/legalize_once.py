"""Calls that share a signature with constant operands: bias adds of one
shape with their own biases, a PReLU's ``maximum(x, 0)`` twice and once
against another scalar, and one operand passed twice."""

import numpy as np
from tvm.script import ir as I
from tvm.script import relax as R

_RNG = np.random.default_rng(0)
BIASES = [_RNG.standard_normal((1, 8, 1, 1)).astype("float32") for _ in range(3)]


@I.ir_module
class SharedSignatures:
    @R.function
    def main(x: R.Tensor((1, 8, 4, 4), "float32"), y: R.Tensor((1, 8, 4, 4), "float32")):
        with R.dataflow():
            a = R.add(x, R.const(BIASES[0]))
            b = R.add(y, R.const(BIASES[1]))
            c = R.add(a, R.const(BIASES[2]))
            d = R.maximum(a, R.const(0.0, "float32"))
            e = R.maximum(b, R.const(0.0, "float32"))
            f = R.maximum(c, R.const(1.0, "float32"))
            g = R.add(d, d)
            h = R.add(d, e)
            gv = (f, g, h)
            R.output(gv)
        return gv
