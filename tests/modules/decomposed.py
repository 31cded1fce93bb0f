"""Operators TVM 0.27 cannot build for a GPU (texscope.rewrites.decompose rewrites them)."""

from tvm.script import ir as I, relax as R


@I.ir_module
class Fma:
    @R.function
    def main(x: R.Tensor((1, 8, 8, 8), "float32"), y: R.Tensor((1, 8, 8, 8), "float32"),
             z: R.Tensor((1, 8, 8, 8), "float32")):
        with R.dataflow():
            o = R.ewise_fma(x, y, z)
            R.output(o)
        return o


@I.ir_module
class FmaDecomposed:
    @R.function
    def main(x: R.Tensor((1, 8, 8, 8), "float32"), y: R.Tensor((1, 8, 8, 8), "float32"),
             z: R.Tensor((1, 8, 8, 8), "float32")):
        with R.dataflow():
            lv = R.multiply(x, y)
            o = R.add(lv, z)
            R.output(o)
        return o


@I.ir_module
class TransposeOIHW:
    """A decoder's stride-2 upsampling conv2d_transpose, kernel OIHW (8 -> 4)."""

    @R.function
    def main(x: R.Tensor((1, 8, 8, 8), "float32"), w: R.Tensor((4, 8, 3, 3), "float32")):
        with R.dataflow():
            o = R.nn.conv2d_transpose(x, w, strides=2, padding=1, output_padding=1,
                                      kernel_layout="OIHW")
            R.output(o)
        return o


@I.ir_module
class TransposeIOHW:
    """The same with TVM's default kernel layout, which TVM legalizes (the CPU reference)."""

    @R.function
    def main(x: R.Tensor((1, 8, 8, 8), "float32"), w: R.Tensor((8, 4, 3, 3), "float32")):
        with R.dataflow():
            o = R.nn.conv2d_transpose(x, w, strides=2, padding=1, output_padding=1)
            R.output(o)
        return o


@I.ir_module
class TransposeNHWC:
    """NHWC data, HWOI kernel, 6 -> 6 channels, stride 2, a 4x4 kernel with
    dilation 1 and asymmetric padding: the decomposed conv pads channels too."""

    @R.function
    def main(x: R.Tensor((1, 5, 7, 6), "float32"), w: R.Tensor((4, 4, 6, 6), "float32")):
        with R.dataflow():
            o = R.nn.conv2d_transpose(x, w, strides=2, padding=[1, 2, 2, 1], data_layout="NHWC",
                                      kernel_layout="HWOI", out_layout="NHWC")
            R.output(o)
        return o


@I.ir_module
class SymbolicConv:
    """A conv over an image of any height and width."""

    @R.function
    def main(x: R.Tensor((1, 8, "height", "width"), "float32"),
             w: R.Tensor((8, 8, 3, 3), "float32")):
        with R.dataflow():
            o = R.nn.conv2d(x, w, padding=1)
            R.output(o)
        return o
