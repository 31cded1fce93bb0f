"""A mean over unit axes, before and after UnitReductionsAsElementWise, and
a model whose fused kernel TVM 0.27's GPU fallback miscompiled."""

from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T


@I.ir_module
class MeanOfMean:
    """``lv1`` reduces a (1, 3, 1, 1) tensor over its unit axes; the add that
    reads it fuses with it into one kernel."""

    @R.function
    def main(x: R.Tensor((1, 3, 4, 4), "float32")):
        with R.dataflow():
            lv = R.mean(x, axis=[2, 3], keepdims=True)
            lv1 = R.mean(lv, axis=[2, 3], keepdims=True)
            gv = R.add(lv, lv1)
            R.output(gv)
        return gv


@I.ir_module
class UnitSum:
    @T.prim_func(private=True, s_tir=True)
    def main(a: T.Buffer((1, 3, 1, 1), "float32"), b: T.Buffer((1, 3, 1, 1), "float32")):
        for i0, i1, i2, i3, k2, k3 in T.grid(1, 3, 1, 1, 1, 1):
            with T.sblock("sum"):
                v0, v1, v2, v3, vk2, vk3 = T.axis.remap("SSSSRR", [i0, i1, i2, i3, k2, k3])
                T.reads(a[v0, v1, vk2, vk3])
                T.writes(b[v0, v1, v2, v3])
                with T.init():
                    b[v0, v1, v2, v3] = T.float32(0.0)
                b[v0, v1, v2, v3] = b[v0, v1, v2, v3] + a[v0, v1, vk2, vk3]


@I.ir_module
class UnitSumElementWise:
    @T.prim_func(private=True, s_tir=True)
    def main(a: T.Buffer((1, 3, 1, 1), "float32"), b: T.Buffer((1, 3, 1, 1), "float32")):
        for i0, i1, i2, i3, k2, k3 in T.grid(1, 3, 1, 1, 1, 1):
            with T.sblock("sum"):
                v0, v1, v2, v3, vk2, vk3 = T.axis.remap("SSSSSS", [i0, i1, i2, i3, k2, k3])
                T.reads(a[v0, v1, vk2, vk3])
                T.writes(b[v0, v1, v2, v3])
                b[v0, v1, v2, v3] = T.Add(T.float32(0.0), a[v0, v1, vk2, vk3])


@I.ir_module
class SumOverTwo:
    """A reduction of two steps: left alone."""

    @T.prim_func(private=True, s_tir=True)
    def main(a: T.Buffer((1, 3, 2, 1), "float32"), b: T.Buffer((1, 3, 1, 1), "float32")):
        for i0, i1, i2, i3, k2, k3 in T.grid(1, 3, 1, 1, 2, 1):
            with T.sblock("sum"):
                v0, v1, v2, v3, vk2, vk3 = T.axis.remap("SSSSRR", [i0, i1, i2, i3, k2, k3])
                T.reads(a[v0, v1, vk2, vk3])
                T.writes(b[v0, v1, v2, v3])
                with T.init():
                    b[v0, v1, v2, v3] = T.float32(0.0)
                b[v0, v1, v2, v3] = b[v0, v1, v2, v3] + a[v0, v1, vk2, vk3]


@I.ir_module
class DepthwiseScale:
    """A 1x1 depthwise conv: one product per output, a per-channel scale."""

    @R.function
    def main(x: R.Tensor((1, 8, 6, 6), "float32"), w: R.Tensor((8, 1, 1, 1), "float32"),
             b: R.Tensor((1, 8, 1, 1), "float32")):
        with R.dataflow():
            lv = R.nn.conv2d(x, w, groups=8)
            gv = R.add(lv, b)
            R.output(gv)
        return gv
