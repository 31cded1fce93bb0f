"""Networks over an image of any height and width: one build runs at every size."""

from tvm.script import ir as I, relax as R, tirx as T


@I.ir_module
class NCHW:
    """An RGB stem (3 channels, stride 2) with a bias and ReLU, a depthwise
    conv, a pointwise conv and a pool: every output extent an expression."""

    @R.function
    def main(x: R.Tensor((1, 3, "h", "w"), "float32"), w1: R.Tensor((8, 3, 3, 3), "float32"),
             b1: R.Tensor((1, 8, 1, 1), "float32"), w2: R.Tensor((8, 1, 3, 3), "float32"),
             w3: R.Tensor((16, 8, 1, 1), "float32")):
        with R.dataflow():
            a = R.nn.conv2d(x, w1, strides=2, padding=1)
            b = R.nn.relu(R.add(a, b1))
            c = R.nn.conv2d(b, w2, padding=1, groups=8)
            d = R.nn.conv2d(c, w3)
            e = R.nn.max_pool2d(d, pool_size=[2, 2], strides=[2, 2])
            R.output(e)
        return e


@I.ir_module
class NHWC:
    """As the TFLite models are: NHWC data, an OHWI stem with a 1-D bias and
    ReLU6, an HWOI depthwise conv."""

    @R.function
    def main(x: R.Tensor((1, "h", "w", 3), "float32"), w1: R.Tensor((8, 3, 3, 3), "float32"),
             b1: R.Tensor((8,), "float32"), w2: R.Tensor((3, 3, 8, 1), "float32")):
        with R.dataflow():
            a = R.nn.conv2d(x, w1, strides=2, padding=1, data_layout="NHWC", kernel_layout="OHWI")
            b = R.clip(R.add(a, b1), 0, 6)
            c = R.nn.conv2d(b, w2, padding=1, groups=8, data_layout="NHWC", kernel_layout="HWOI")
            R.output(c)
        return c


@I.ir_module
class Stem:
    """A 3-channel conv of symbolic size, before channel padding."""

    @R.function
    def main(x: R.Tensor((1, 3, "h", "w"), "float32"), k: R.Tensor((8, 3, 3, 3), "float32")):
        with R.dataflow():
            o = R.nn.conv2d(x, k, padding=1)
            R.output(o)
        return o


@I.ir_module
class StemPadded:
    """Stem after PadChannels: a zero input channel in the data and weights."""

    @R.function
    def main(x: R.Tensor((1, 3, "h", "w"), "float32"), k: R.Tensor((8, 3, 3, 3), "float32")):
        h, w = T.int64(), T.int64()
        with R.dataflow():
            lv = R.nn.pad(x, [0, 0, 0, 1, 0, 0, 0, 0])
            lv1 = R.nn.pad(k, [0, 0, 0, 1, 0, 0, 0, 0])
            o = R.nn.conv2d(lv, lv1, padding=1)
            R.output(o)
        return o


@I.ir_module
class Pack:
    """An NCHW -> NCHW4c layout transform of symbolic height and width."""

    @R.function
    def main(x: R.Tensor((1, 8, "h", "w"), "float32")):
        gv = R.layout_transform(x, index_map=lambda n, c, h, w: (n, c // 4, h, w, c % 4))
        return gv
