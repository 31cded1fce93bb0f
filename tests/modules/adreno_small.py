"""Small modules of the kind TVM's own Adreno tests build
(tests/python/relax/backend/adreno/), which texscope once failed on (issue 52).
`texscope run tests/modules/adreno_small.py --module NAME` runs each."""

from tvm.script import ir as I
from tvm.script import relax as R


@I.ir_module
class ConvPlaneBias:
    """A conv's output plus a bias over rows and columns, the same for every
    batch and channel: lifted to (1, 1, 26, 26), which does not pack."""

    @R.function
    def main(x: R.Tensor((1, 16, 28, 28), "float32"), w: R.Tensor((32, 16, 3, 3), "float32"),
             bias: R.Tensor((26, 26), "float32")):
        with R.dataflow():
            conv = R.nn.conv2d(x, w)
            out = R.add(conv, bias)
            R.output(out)
        return out


@I.ir_module
class ConvFma:
    """``R.ewise_fma``, which TVM's VM cannot emit; the build and the CPU
    reference both write it as a multiply and an add."""

    @R.function
    def main(x: R.Tensor((1, 8, 6, 6), "float32"), w: R.Tensor((8, 8, 3, 3), "float32"),
             s: R.Tensor((1, 8, 6, 6), "float32"), t: R.Tensor((1, 8, 6, 6), "float32")):
        with R.dataflow():
            c = R.nn.conv2d(x, w, padding=1)
            f = R.ewise_fma(c, s, t)
            R.output(f)
        return f


@I.ir_module
class TransposeOIHW:
    """A conv2d_transpose with an OIHW kernel, which TVM legalizes only as IOHW."""

    @R.function
    def main(x: R.Tensor((1, 8, 6, 6), "float32"), w: R.Tensor((4, 8, 3, 3), "float32")):
        with R.dataflow():
            y = R.nn.conv2d_transpose(x, w, strides=2, padding=1, output_padding=1,
                                      kernel_layout="OIHW")
            R.output(y)
        return y


@I.ir_module
class RankOnly:
    """An input with a rank and no shape."""

    @R.function
    def main(x: R.Tensor(dtype="float32", ndim=4), w: R.Tensor((32, 16, 3, 3), "float32")):
        with R.dataflow():
            c = R.nn.conv2d(x, w, padding=1)
            r = R.nn.relu(c)
            R.output(r)
        return r


@I.ir_module
class TransposeIOHW:
    """TransposeOIHW in TVM's own kernel layout, which its CPU build takes."""

    @R.function
    def main(x: R.Tensor((1, 8, 6, 6), "float32"), w: R.Tensor((8, 4, 3, 3), "float32")):
        with R.dataflow():
            y = R.nn.conv2d_transpose(x, w, strides=2, padding=1, output_padding=1)
            R.output(y)
        return y
