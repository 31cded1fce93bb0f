"""Relax modules run on OpenCL that the decision-rule modules do not cover."""

from tvm.script import ir as I
from tvm.script import relax as R


@I.ir_module
class AvgPool:
    @R.function
    def main(x: R.Tensor((1, 8, 16, 16), "float32"), w: R.Tensor((8, 8, 3, 3), "float32")):
        with R.dataflow():
            c = R.nn.conv2d(x, w, padding=(1, 1))
            gv = R.nn.avg_pool2d(c, pool_size=(3, 3), strides=(1, 1), padding=(1, 1))
            R.output(gv)
        return gv


@I.ir_module
class LayerNorm:
    @R.function
    def main(
        x: R.Tensor((1, 8, 16, 16), "float32"),
        w: R.Tensor((8, 8, 3, 3), "float32"),
        gamma: R.Tensor((16,), "float32"),
        beta: R.Tensor((16,), "float32"),
    ):
        with R.dataflow():
            c = R.nn.conv2d(x, w, padding=(1, 1))
            gv = R.nn.layer_norm(c, gamma, beta, axes=[-1])
            R.output(gv)
        return gv


@I.ir_module
class SharedKernel:
    """Two convs of one shape: the first writes a texture (a conv reads it),
    the second a buffer (main returns it): one PrimFunc, two storage
    signatures."""

    @R.function
    def main(
        x: R.Tensor((1, 32, 28, 28), "float32"),
        w1: R.Tensor((32, 32, 3, 3), "float32"),
        w2: R.Tensor((32, 32, 3, 3), "float32"),
    ):
        with R.dataflow():
            a = R.nn.conv2d(x, w1, padding=(1, 1))
            gv = R.nn.conv2d(a, w2, padding=(1, 1))
            R.output(gv)
        return gv


@I.ir_module
class PackedInput:
    """An input already packed NCHW4c, read by element-wise kernels only."""

    @R.function
    def main(x: R.Tensor((1, 2, 16, 16, 4), "float32"), y: R.Tensor((1, 2, 16, 16, 4), "float32")):
        with R.dataflow():
            a = R.add(x, y)
            b = R.multiply(a, x)
            gv = R.nn.relu(b)
            R.output(gv)
        return gv


@I.ir_module
class NotLowered:
    """A Relax operator left as it is: nothing the executor can launch."""

    @R.function
    def main(x: R.Tensor((1, 8, 16, 16), "float32")):
        with R.dataflow():
            gv = R.nn.relu(x)
            R.output(gv)
        return gv


@I.ir_module
class Half:
    """float16 throughout: RGBA half texels."""

    @R.function
    def main(x: R.Tensor((1, 8, 16, 16), "float16"), w: R.Tensor((8, 8, 3, 3), "float16")):
        with R.dataflow():
            c = R.nn.conv2d(x, w, padding=(1, 1), out_dtype="float16")
            gv = R.nn.relu(c)
            R.output(gv)
        return gv
