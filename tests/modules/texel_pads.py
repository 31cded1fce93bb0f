"""Channel pads between an unpack and a pack (texscope.rewrites.texel_pad)."""
# pylint: disable=missing-class-docstring,missing-function-docstring,invalid-name
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T


def _chain(pad_width, pack=lambda i0, i1, i2, i3: (i0, i3 // 4, i1, i2, i3 % 4), out_blocks=7,
           out_h=8):
    @I.ir_module
    class Module:
        @R.function
        def main(x: R.Tensor((1, 6, 8, 8, 4), "float32")):
            with R.dataflow():
                a = R.layout_transform(
                    x, index_map=T.index_map(lambda i0, i1, i2, i3, i4: (i0, i2, i3, i1 * 4 + i4)))
                b = R.nn.pad(a, pad_width=pad_width, pad_value=0.0, pad_mode="constant")
                c = R.layout_transform(b, index_map=T.index_map(pack))
                R.output(c)
            return c

    return Module


# BlazeFace's residual: 24 channels padded to 28 (one texel).
ResidualPad = _chain([0, 0, 0, 0, 0, 0, 0, 4])
# 24 to 30 channels: half a texel of zeros; stays as it is.
HalfTexelPad = _chain([0, 0, 0, 0, 0, 0, 0, 6])
# A pad of rows; stays as it is.
RowPad = _chain([0, 0, 0, 4, 0, 0, 0, 0])


@I.ir_module
class ResidualPadOnPacked:
    @R.function
    def main(x: R.Tensor((1, 6, 8, 8, 4), "float32")) -> R.Tensor((1, 7, 8, 8, 4), "float32"):
        with R.dataflow():
            c = R.nn.pad(x, pad_width=[0, 0, 0, 1, 0, 0, 0, 0, 0, 0], pad_value=0.0,
                         pad_mode="constant")
            R.output(c)
        return c


@I.ir_module
class PooledResidualPad:
    """Palm detection's downsampling residual: a 2x2 max pool of 32 channels
    padded to 64 and added to a strided conv's output.  The pad, on the
    packed tensor, fuses with the pool: one kernel writing 16 texel blocks
    of which the pool computes 8 (48 x 48 pixels, as in palm_detection: 9
    groups of 256 threads per block of texels)."""

    @R.function
    def main(x: R.Tensor((1, 32, 96, 96), "float32"), w1: R.Tensor((32, 32, 1, 1), "float32"),
             w2: R.Tensor((64, 32, 1, 1), "float32"), w3: R.Tensor((64, 64, 1, 1), "float32")):
        with R.dataflow():
            a = R.nn.conv2d(x, w1)
            pooled = R.nn.max_pool2d(a, pool_size=(2, 2), strides=(2, 2))
            padded = R.nn.pad(pooled, pad_width=[0, 0, 0, 32, 0, 0, 0, 0], pad_value=0.0,
                              pad_mode="constant")
            b = R.nn.conv2d(a, w2, strides=(2, 2))
            c = R.add(b, padded)
            gv = R.nn.conv2d(c, w3)
            R.output(gv)
        return gv


@I.ir_module
class ConvResidualPad:
    """BlazeFace's residual: 24 channels padded to 28 and added to a conv's
    output.  The packed pad fuses into the conv's epilogue (1x1 convs: a
    padded conv's own data pad is a kernel of its own in TVM's schedule)."""

    @R.function
    def main(x: R.Tensor((1, 24, 16, 16), "float32"), w0: R.Tensor((24, 24, 1, 1), "float32"),
             w1: R.Tensor((28, 24, 1, 1), "float32"), w2: R.Tensor((28, 28, 1, 1), "float32")):
        with R.dataflow():
            h = R.nn.conv2d(x, w0)
            a = R.nn.conv2d(h, w1)
            padded = R.nn.pad(h, pad_width=[0, 0, 0, 4, 0, 0, 0, 0], pad_value=0.0,
                              pad_mode="constant")
            b = R.nn.relu(R.add(a, padded))
            gv = R.nn.conv2d(b, w2)
            R.output(gv)
        return gv
