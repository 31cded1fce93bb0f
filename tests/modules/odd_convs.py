"""Convs that do not pack as they stand: NHWC layouts, TFLite kernel layouts,
channel counts that are not multiples of 4, depthwise and grouped."""

from tvm.script import ir as I, relax as R


@I.ir_module
class NhwcStem:
    """TFLite's RGB stem: 5x5, stride 2, NHWC data, HWIO weights, 3 -> 24."""

    @R.function
    def main(x: R.Tensor((1, 32, 32, 3), "float32"), w: R.Tensor((5, 5, 3, 24), "float32")):
        with R.dataflow():
            y = R.nn.conv2d(x, w, strides=2, padding=[1, 1, 2, 2], data_layout="NHWC",
                            kernel_layout="HWIO", out_layout="NHWC")
            R.output(y)
        return y


@I.ir_module
class OddChannels:
    """36 -> 42 (1x1, HWIO) then a 42-channel stride-2 depthwise (HWOI) with a
    bias added in NHWC, as face_detection_short_range has them."""

    @R.function
    def main(x: R.Tensor((1, 16, 16, 36), "float32"), w: R.Tensor((1, 1, 36, 42), "float32"),
             dw: R.Tensor((3, 3, 42, 1), "float32"), b: R.Tensor((42,), "float32")):
        with R.dataflow():
            a = R.nn.conv2d(x, w, data_layout="NHWC", kernel_layout="HWIO", out_layout="NHWC")
            c = R.nn.conv2d(a, dw, strides=2, padding=[0, 0, 1, 1], groups=42,
                            data_layout="NHWC", kernel_layout="HWOI", out_layout="NHWC")
            y = R.nn.relu(R.add(c, b))
            R.output(y)
        return y


@I.ir_module
class Grouped:
    """3 groups of 6 input and 3 output channels (18 -> 9), NCHW / OIHW."""

    @R.function
    def main(x: R.Tensor((1, 18, 12, 12), "float32"), w: R.Tensor((9, 6, 3, 3), "float32")):
        with R.dataflow():
            y = R.nn.conv2d(x, w, padding=1, groups=3)
            R.output(y)
        return y


@I.ir_module
class DepthwiseMultiplier:
    """A depthwise conv with channel multiplier 2 over 5 channels (5 -> 10)."""

    @R.function
    def main(x: R.Tensor((1, 5, 10, 10), "float32"), w: R.Tensor((10, 1, 3, 3), "float32")):
        with R.dataflow():
            y = R.nn.conv2d(x, w, padding=1, groups=5)
            R.output(y)
        return y


@I.ir_module
class BiasPrelu:
    """A conv, its 1-D bias and a PReLU as the TFLite frontend writes them: the
    activation and the broadcast slopes flattened around prelu(axis=0)."""

    @R.function
    def main(x: R.Tensor((1, 8, 8, 8), "float32"), w: R.Tensor((3, 3, 8, 8), "float32"),
             b: R.Tensor((8,), "float32"), alpha: R.Tensor((1, 1, 8), "float32")):
        with R.dataflow():
            c = R.nn.conv2d(x, w, padding=1, data_layout="NHWC", kernel_layout="HWIO",
                            out_layout="NHWC")
            biased = R.add(c, b)
            slopes = R.broadcast_to(alpha, R.shape([1, 8, 8, 8]))
            flat = R.reshape(biased, R.shape([512]))
            flat_slopes = R.reshape(slopes, R.shape([512]))
            activated = R.nn.prelu(flat, flat_slopes, axis=0)
            y = R.reshape(activated, R.shape([1, 8, 8, 8]))
            R.output(y)
        return y


@I.ir_module
class BiasPreluRewritten:
    @R.function
    def main(x: R.Tensor((1, 8, 8, 8), "float32"), w: R.Tensor((3, 3, 8, 8), "float32"),
             b: R.Tensor((8,), "float32"), alpha: R.Tensor((1, 1, 8), "float32")):
        with R.dataflow():
            c = R.nn.conv2d(x, w, padding=1, data_layout="NHWC", kernel_layout="HWIO",
                            out_layout="NHWC")
            biased = R.add(c, b)
            lv = R.maximum(biased, R.const(0.0, "float32"))
            lv1 = R.minimum(biased, R.const(0.0, "float32"))
            lv2 = R.multiply(lv1, alpha)
            y = R.add(lv, lv2)
            R.output(y)
        return y


@I.ir_module
class BiasPreluRanked:
    """BiasPreluRewritten after ExpandBroadcastRank."""

    @R.function
    def main(x: R.Tensor((1, 8, 8, 8), "float32"), w: R.Tensor((3, 3, 8, 8), "float32"),
             b: R.Tensor((8,), "float32"), alpha: R.Tensor((1, 1, 8), "float32")):
        with R.dataflow():
            c = R.nn.conv2d(x, w, padding=1, data_layout="NHWC", kernel_layout="HWIO",
                            out_layout="NHWC")
            lv = R.reshape(b, R.shape([1, 1, 1, 8]))
            biased = R.add(c, lv)
            lv1 = R.maximum(biased, R.const(0.0, "float32"))
            lv2 = R.minimum(biased, R.const(0.0, "float32"))
            lv3 = R.reshape(alpha, R.shape([1, 1, 1, 8]))
            lv4 = R.multiply(lv2, lv3)
            y = R.add(lv1, lv4)
            R.output(y)
        return y
