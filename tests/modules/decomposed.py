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


@I.ir_module
class TransposeGrouped:
    """A grouped conv2d_transpose: 8 -> 12 channels in 4 groups, stride 2, IOHW."""

    @R.function
    def main(x: R.Tensor((1, 8, 6, 6), "float32"), w: R.Tensor((8, 3, 4, 4), "float32")):
        with R.dataflow():
            o = R.nn.conv2d_transpose(x, w, strides=2, padding=1, groups=4)
            R.output(o)
        return o


@I.ir_module
class TransposeDepthwiseOIHW:
    """A depthwise upsampling conv2d_transpose of 6 channels (not a multiple
    of 4), kernel OIHW."""

    @R.function
    def main(x: R.Tensor((1, 6, 5, 5), "float32"), w: R.Tensor((1, 6, 3, 3), "float32")):
        with R.dataflow():
            o = R.nn.conv2d_transpose(x, w, strides=2, padding=1, output_padding=1, groups=6,
                                      kernel_layout="OIHW")
            R.output(o)
        return o


@I.ir_module
class TransposeDepthwiseIOHW:
    """The same with TVM's default kernel layout (the CPU reference)."""

    @R.function
    def main(x: R.Tensor((1, 6, 5, 5), "float32"), w: R.Tensor((6, 1, 3, 3), "float32")):
        with R.dataflow():
            o = R.nn.conv2d_transpose(x, w, strides=2, padding=1, output_padding=1, groups=6)
            R.output(o)
        return o


@I.ir_module
class TransposeGroupedDecomposed:
    """TransposeGrouped after DecomposeForGPU: the zero-inserted data, each
    group's (in, out) kernel block transposed, flipped, a grouped conv."""

    @R.function
    def main(x: R.Tensor((1, 8, 6, 6), "float32"), w: R.Tensor((8, 3, 4, 4), "float32")):
        with R.dataflow():
            lv = R.reshape(x, R.shape([1, 8, 6, 1, 6, 1]))
            lv1 = R.nn.pad(lv, [0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1])
            lv2 = R.reshape(lv1, R.shape([1, 8, 12, 12]))
            lv3 = R.strided_slice(lv2, (2, 3), (0, 0), (11, 11))
            lv4 = R.reshape(w, R.shape([4, 2, 3, 4, 4]))
            lv5 = R.permute_dims(lv4, axes=[0, 2, 1, 3, 4])
            lv6 = R.reshape(lv5, R.shape([12, 2, 4, 4]))
            lv7 = R.flip(lv6, axis=2)
            lv8 = R.flip(lv7, axis=3)
            o = R.nn.conv2d(lv3, lv8, padding=2, groups=4)
            R.output(o)
        return o


@I.ir_module
class TransposeBlocks:
    """A kernel as large as its strides, 2 x 3, unpadded: each input pixel
    writes its own block of the output (selfie segmentation's head: 2 x 2)."""

    @R.function
    def main(x: R.Tensor((1, 8, 6, 5), "float32"), w: R.Tensor((8, 3, 2, 3), "float32")):
        with R.dataflow():
            o = R.nn.conv2d_transpose(x, w, strides=[2, 3])
            R.output(o)
        return o


@I.ir_module
class TransposeBlocksDecomposed:
    @R.function
    def main(x: R.Tensor((1, 8, 6, 5), "float32"), w: R.Tensor((8, 3, 2, 3), "float32")):
        with R.dataflow():
            lv = R.permute_dims(w, axes=[1, 2, 3, 0])
            lv1 = R.reshape(lv, R.shape([18, 8, 1, 1]))
            lv2 = R.nn.conv2d(x, lv1)
            lv3 = R.reshape(lv2, R.shape([1, 3, 2, 3, 6, 5]))
            lv4 = R.permute_dims(lv3, axes=[0, 1, 4, 2, 5, 3])
            o = R.reshape(lv4, R.shape([1, 3, 12, 15]))
            R.output(o)
        return o
