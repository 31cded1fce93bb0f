"""Relax modules, one per decision rule, as a model author would write them."""

from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from texscope.models.examples import Seed  # noqa: F401  (the design's example)


@I.ir_module
class ConvRelu:
    @R.function
    def main(x: R.Tensor((1, 8, 16, 16), "float32"), w: R.Tensor((8, 8, 3, 3), "float32")):
        with R.dataflow():
            c = R.nn.conv2d(x, w, padding=(1, 1))
            gv = R.nn.relu(c)
            R.output(gv)
        return gv


@I.ir_module
class Residual:
    @R.function
    def main(
        x: R.Tensor((1, 8, 16, 16), "float32"),
        w1: R.Tensor((8, 8, 3, 3), "float32"),
        w2: R.Tensor((8, 8, 3, 3), "float32"),
    ):
        with R.dataflow():
            c1 = R.nn.conv2d(x, w1, padding=(1, 1))
            r1 = R.nn.relu(c1)
            c2 = R.nn.conv2d(r1, w2, padding=(1, 1))
            s = R.add(c2, r1)
            gv = R.nn.relu(s)
            R.output(gv)
        return gv


@I.ir_module
class Concat:
    @R.function
    def main(
        x: R.Tensor((1, 8, 16, 16), "float32"),
        w1: R.Tensor((8, 8, 3, 3), "float32"),
        w2: R.Tensor((8, 8, 3, 3), "float32"),
        w3: R.Tensor((8, 16, 1, 1), "float32"),
    ):
        with R.dataflow():
            a = R.nn.conv2d(x, w1, padding=(1, 1))
            b = R.nn.conv2d(x, w2, padding=(1, 1))
            ab = R.concat((a, b), axis=1)
            gv = R.nn.conv2d(ab, w3)
            R.output(gv)
        return gv


@I.ir_module
class MaxPool:
    @R.function
    def main(x: R.Tensor((1, 8, 16, 16), "float32"), w: R.Tensor((8, 8, 3, 3), "float32")):
        with R.dataflow():
            c = R.nn.conv2d(x, w, padding=(1, 1))
            gv = R.nn.max_pool2d(c, pool_size=(2, 2), strides=(2, 2))
            R.output(gv)
        return gv


@I.ir_module
class Reductions:
    """The conv output is read only by reductions: no texture pays off."""

    @R.function
    def main(x: R.Tensor((1, 8, 16, 16), "float32"), w: R.Tensor((8, 8, 3, 3), "float32")):
        with R.dataflow():
            c = R.nn.conv2d(x, w, padding=(1, 1))
            m = R.mean(c, axis=[2, 3])
            s = R.sum(c, axis=[2, 3])
            gv = (m, s)
            R.output(gv)
        return gv


@I.ir_module
class Softmax:
    @R.function
    def main(x: R.Tensor((1, 8, 16, 16), "float32"), w: R.Tensor((8, 8, 3, 3), "float32")):
        with R.dataflow():
            c = R.nn.conv2d(x, w, padding=(1, 1))
            gv = R.nn.softmax(c, axis=1)
            R.output(gv)
        return gv


@I.ir_module
class Conflict:
    """The conv output feeds a conv (texture only) and two reductions (buffers only)."""

    @R.function
    def main(
        x: R.Tensor((1, 8, 16, 16), "float32"),
        w: R.Tensor((8, 8, 3, 3), "float32"),
        k: R.Tensor((8, 8, 1, 1), "float32"),
    ):
        with R.dataflow():
            c = R.nn.conv2d(x, w, padding=(1, 1))
            p = R.nn.conv2d(c, k)
            m = R.mean(c, axis=[2, 3])
            s = R.sum(c, axis=[2, 3])
            gv = (p, m, s)
            R.output(gv)
        return gv


@I.ir_module
class PackedParams:
    """Parameters already packed: x feeds a pool and an add, y only a reduction."""

    @R.function
    def main(x: R.Tensor((1, 2, 16, 16, 4), "float32"), y: R.Tensor((1, 2, 16, 16, 4), "float32")):
        with R.dataflow():
            p = R.nn.max_pool2d(x, pool_size=(2, 2), strides=(2, 2), layout="NCHW4c")
            a = R.add(x, x)
            m = R.sum(y, axis=[2, 3])
            gv = (p, a, m)
            R.output(gv)
        return gv


@I.ir_module
class BatchNorm:
    """Batch-norm parameters are 1-D: they are never textures, so never copied."""

    @R.function
    def main(
        x: R.Tensor((1, 8, 16, 16), "float32"),
        w: R.Tensor((8, 8, 3, 3), "float32"),
        gamma: R.Tensor((8,), "float32"),
        beta: R.Tensor((8,), "float32"),
        mean: R.Tensor((8,), "float32"),
        var: R.Tensor((8,), "float32"),
    ):
        with R.dataflow():
            c = R.nn.conv2d(x, w, padding=(1, 1))
            bn = R.nn.batch_norm(c, gamma, beta, mean, var, axis=1)
            gv = R.nn.relu(bn[0])
            R.output(gv)
        return gv


@I.ir_module
class OverLimits:
    """Under a target with tiny limits the small tensor fits and the large does not."""

    @R.function
    def main(
        small: R.Tensor((1, 8, 16, 16), "float32"),
        large: R.Tensor((1, 8, 128, 128), "float32"),
        w: R.Tensor((8, 8, 3, 3), "float32"),
    ):
        with R.dataflow():
            a = R.nn.conv2d(small, w, padding=(1, 1))
            b = R.nn.conv2d(large, w, padding=(1, 1))
            gv = (a, b)
            R.output(gv)
        return gv


@I.ir_module
class NoDataflow:
    @R.function
    def main(x: R.Tensor((1, 2, 8, 8, 4), "float32")):
        y = R.nn.relu(x)
        return y


@I.ir_module
class NoShape:
    @R.function
    def main(x: R.Tensor("float32", ndim=5)):
        with R.dataflow():
            y = R.nn.relu(x)
            R.output(y)
        return y


@I.ir_module
class SplitFields:
    """Each field of a split goes its own way: one to a pool, one to a reduction."""

    @R.function
    def main(x: R.Tensor((1, 16, 16, 16), "float32"), w: R.Tensor((16, 16, 3, 3), "float32")):
        with R.dataflow():
            c = R.nn.conv2d(x, w, padding=(1, 1))
            parts = R.split(c, 2, axis=1)
            p = R.nn.max_pool2d(parts[0], pool_size=(2, 2), strides=(2, 2))
            m = R.sum(parts[1], axis=[2, 3])
            gv = (p, m)
            R.output(gv)
        return gv


@I.ir_module
class Depthwise:
    """A depthwise conv then a pointwise one, as in MobileNet."""

    @R.function
    def main(
        x: R.Tensor((1, 8, 16, 16), "float32"),
        dw: R.Tensor((8, 1, 3, 3), "float32"),
        pw: R.Tensor((8, 8, 1, 1), "float32"),
    ):
        with R.dataflow():
            a = R.nn.conv2d(x, dw, padding=(1, 1), groups=8)
            gv = R.nn.conv2d(a, pw)
            R.output(gv)
        return gv


@I.ir_module
class PackedThenDepthwise:
    """A packed conv feeding a depthwise one (found by the fuzzer: ConvertLayout
    used to push NCHW4c into the depthwise conv and assert)."""

    @R.function
    def main(
        x: R.Tensor((1, 8, 16, 16), "float32"),
        w: R.Tensor((8, 8, 3, 3), "float32"),
        dw: R.Tensor((8, 1, 3, 3), "float32"),
    ):
        with R.dataflow():
            a = R.nn.conv2d(x, w, padding=(1, 1))
            gv = R.nn.conv2d(a, dw, padding=(1, 1), groups=8)
            R.output(gv)
        return gv


@I.ir_module
class Symbolic:
    """N, H, W known only at run time: nothing here can be a texture."""

    @R.function
    def main(x: R.Tensor(("n", 8, "h", "w"), "float32"), k: R.Tensor((8, 8, 3, 3), "float32")):
        with R.dataflow():
            c = R.nn.conv2d(x, k, padding=(1, 1))
            gv = R.nn.relu(c)
            R.output(gv)
        return gv


@I.ir_module
class MatchCast:
    """A shape-less input cast to a symbolic shape."""

    @R.function
    def main(x: R.Tensor("float32", ndim=4), k: R.Tensor((8, 8, 3, 3), "float32")):
        n, h, w = T.int64(), T.int64(), T.int64()
        with R.dataflow():
            y = R.match_cast(x, R.Tensor((n, 8, h, w), "float32"))
            c = R.nn.conv2d(y, k, padding=(1, 1))
            R.output(c)
        return c


@I.ir_module
class Empty:
    @R.function
    def main(x: R.Tensor((1, 8, 4, 4), "float32")):
        return x


@I.ir_module
class UnknownOp:
    """An operator no kernel is registered for reads and writes buffers."""

    @R.function
    def main(x: R.Tensor((1, 8, 16, 16), "float32"), w: R.Tensor((8, 8, 3, 3), "float32")):
        with R.dataflow():
            c = R.nn.conv2d(x, w, padding=(1, 1))
            e = R.call_dps_packed("my_custom_kernel", (c,), out_ty=R.Tensor((1, 8, 16, 16), "float32"))
            gv = R.nn.relu(e)
            R.output(gv)
        return gv


@I.ir_module
class TwoFunctions:
    """main calls a private Relax function: both are annotated, the call passes buffers."""

    @R.function(private=True)
    def block(x: R.Tensor((1, 2, 16, 16, 4), "float32"), w: R.Tensor((2, 8, 3, 3, 4), "float32")):
        with R.dataflow():
            c = R.nn.conv2d(x, w, padding=(1, 1), data_layout="NCHW4c", kernel_layout="OIHW4o",
                            out_layout="NCHW4c")
            gv = R.nn.relu(c)
            R.output(gv)
        return gv

    @R.function
    def main(x: R.Tensor((1, 2, 16, 16, 4), "float32"), w: R.Tensor((2, 8, 3, 3, 4), "float32")):
        cls = TwoFunctions
        with R.dataflow():
            a = R.nn.relu(x)
            b = cls.block(a, w)
            gv = R.nn.max_pool2d(b, pool_size=(2, 2), strides=(2, 2), layout="NCHW4c")
            R.output(gv)
        return gv


@I.ir_module
class PublicCallee:
    @R.function
    def block(x: R.Tensor((1, 2, 16, 16, 4), "float32")):
        with R.dataflow():
            gv = R.nn.relu(x)
            R.output(gv)
        return gv

    @R.function
    def main(x: R.Tensor((1, 2, 16, 16, 4), "float32")):
        cls = PublicCallee
        with R.dataflow():
            b = cls.block(x)
            gv = R.add(b, b)
            R.output(gv)
        return gv


@I.ir_module
class SharedPackedInput:
    """A packed input read by an element-wise kernel and a reduction (buffers only)."""

    @R.function
    def main(x: R.Tensor((1, 2, 16, 16, 4), "float32")):
        with R.dataflow():
            r = R.nn.relu(x)
            m = R.sum(x, axis=[2, 3])
            gv = (r, m)
            R.output(gv)
        return gv


@I.ir_module
class AlreadyPacked:
    """A conv given in NCHW4c: ConvertLayout cannot make its layout follow NCHW4c again."""

    @R.function
    def main(x: R.Tensor((1, 2, 8, 8, 4), "float32"), w: R.Tensor((2, 8, 3, 3, 4), "float32")):
        with R.dataflow():
            c = R.nn.conv2d(x, w, padding=(1, 1), data_layout="NCHW4c", kernel_layout="OIHW4o")
            R.output(c)
        return c
