"""Small bundled example modules."""

from tvm.script import ir as I
from tvm.script import relax as R


@I.ir_module
class Seed:
    """The texture-scoping design's example: one conv2d on NCHW tensors."""

    @R.function
    def main(
        x: R.Tensor((2, 64, 56, 56), "float32"), w: R.Tensor((32, 64, 3, 3), "float32")
    ) -> R.Tensor((2, 32, 54, 54), "float32"):
        with R.dataflow():
            gv = R.nn.conv2d(x, w, out_dtype="float32")
            R.output(gv)
        return gv
