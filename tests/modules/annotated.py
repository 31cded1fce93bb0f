"""Modules already annotated, for stage 5 alone."""

from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from .expected import ADRENO


@I.ir_module
class TextureOnlyCopied:
    """relu writes a texture whose only reader is a copy to a buffer."""

    I.module_global_infos(
        {"vdevice": [I.vdevice(ADRENO, 0, "global"), I.vdevice(ADRENO, 0, "global.texture-weight")]}
    )

    @T.prim_func(private=True)
    def relu(x: T.Buffer((1, 2, 4, 4, 4), "float32"), y: T.Buffer((1, 2, 4, 4, 4), "float32")):
        T.func_attr({"op_pattern": 0})
        for i0, i1, i2, i3, i4 in T.grid(1, 2, 4, 4, 4):
            y[i0, i1, i2, i3, i4] = T.max(x[i0, i1, i2, i3, i4], T.float32(0))

    @R.function
    def main(x: R.Tensor((1, 2, 4, 4, 4), "float32", vdevice="opencl:0:global")):
        cls = TextureOnlyCopied
        with R.dataflow():
            t = R.call_tir(
                cls.relu,
                (x,),
                out_ty=R.Tensor((1, 2, 4, 4, 4), "float32", vdevice="opencl:1:global.texture-weight"),
            )
            b = R.to_vdevice(t, dst_vdevice="opencl:0:global")
            R.output(b)
        return b


@I.ir_module
class TextureOnlyCopiedFolded:
    I.module_global_infos(
        {"vdevice": [I.vdevice(ADRENO, 0, "global"), I.vdevice(ADRENO, 0, "global.texture-weight")]}
    )

    @T.prim_func(private=True)
    def relu(x: T.Buffer((1, 2, 4, 4, 4), "float32"), y: T.Buffer((1, 2, 4, 4, 4), "float32")):
        T.func_attr({"op_pattern": 0})
        for i0, i1, i2, i3, i4 in T.grid(1, 2, 4, 4, 4):
            y[i0, i1, i2, i3, i4] = T.max(x[i0, i1, i2, i3, i4], T.float32(0))

    @R.function
    def main(x: R.Tensor((1, 2, 4, 4, 4), "float32", vdevice="opencl:0:global")):
        cls = TextureOnlyCopiedFolded
        with R.dataflow():
            b = R.call_tir(
                cls.relu, (x,), out_ty=R.Tensor((1, 2, 4, 4, 4), "float32", vdevice="opencl:0:global")
            )
            R.output(b)
        return b


@I.ir_module
class TextureAlsoReadDirectly:
    """The texture has a second reader, so its copy must stay."""

    I.module_global_infos(
        {"vdevice": [I.vdevice(ADRENO, 0, "global"), I.vdevice(ADRENO, 0, "global.texture-weight")]}
    )

    @T.prim_func(private=True)
    def relu(x: T.Buffer((1, 2, 4, 4, 4), "float32"), y: T.Buffer((1, 2, 4, 4, 4), "float32")):
        T.func_attr({"op_pattern": 0})
        for i0, i1, i2, i3, i4 in T.grid(1, 2, 4, 4, 4):
            y[i0, i1, i2, i3, i4] = T.max(x[i0, i1, i2, i3, i4], T.float32(0))

    @R.function
    def main(x: R.Tensor((1, 2, 4, 4, 4), "float32", vdevice="opencl:0:global")):
        cls = TextureAlsoReadDirectly
        with R.dataflow():
            t = R.call_tir(
                cls.relu,
                (x,),
                out_ty=R.Tensor((1, 2, 4, 4, 4), "float32", vdevice="opencl:1:global.texture-weight"),
            )
            b = R.to_vdevice(t, dst_vdevice="opencl:0:global")
            u = R.call_tir(
                cls.relu,
                (t,),
                out_ty=R.Tensor((1, 2, 4, 4, 4), "float32", vdevice="opencl:0:global"),
            )
            gv = (b, u)
            R.output(gv)
        return gv


@I.ir_module
class ReturnsTexture:
    """The texture goes back to the caller, which reads buffers."""

    I.module_global_infos(
        {"vdevice": [I.vdevice(ADRENO, 0, "global"), I.vdevice(ADRENO, 0, "global.texture-weight")]}
    )

    @T.prim_func(private=True)
    def relu(x: T.Buffer((1, 2, 4, 4, 4), "float32"), y: T.Buffer((1, 2, 4, 4, 4), "float32")):
        T.func_attr({"op_pattern": 0})
        for i0, i1, i2, i3, i4 in T.grid(1, 2, 4, 4, 4):
            y[i0, i1, i2, i3, i4] = T.max(x[i0, i1, i2, i3, i4], T.float32(0))

    @R.function
    def main(x: R.Tensor((1, 2, 4, 4, 4), "float32", vdevice="opencl:0:global")):
        cls = ReturnsTexture
        with R.dataflow():
            t = R.call_tir(
                cls.relu,
                (x,),
                out_ty=R.Tensor((1, 2, 4, 4, 4), "float32", vdevice="opencl:1:global.texture-weight"),
            )
            R.output(t)
        return t


@I.ir_module
class TwinKernels:
    """Two identical kernels, as one legalization per call would make them."""

    @T.prim_func(private=True)
    def relu(x: T.Buffer((4,), "float32"), y: T.Buffer((4,), "float32")):
        for i in range(4):
            y[i] = T.max(x[i], T.float32(0))

    @T.prim_func(private=True)
    def relu1(x: T.Buffer((4,), "float32"), y: T.Buffer((4,), "float32")):
        for i in range(4):
            y[i] = T.max(x[i], T.float32(0))

    @R.function
    def main(x: R.Tensor((4,), "float32")):
        cls = TwinKernels
        with R.dataflow():
            a = R.call_tir(cls.relu, (x,), out_ty=R.Tensor((4,), "float32"))
            b = R.call_tir(cls.relu1, (a,), out_ty=R.Tensor((4,), "float32"))
            R.output(b)
        return b


@I.ir_module
class TwinKernelsPastNine:
    """Twins named by a builder's counter past 9: relu9 came first."""

    @T.prim_func(private=True)
    def relu9(x: T.Buffer((4,), "float32"), y: T.Buffer((4,), "float32")):
        for i in range(4):
            y[i] = T.max(x[i], T.float32(0))

    @T.prim_func(private=True)
    def relu10(x: T.Buffer((4,), "float32"), y: T.Buffer((4,), "float32")):
        for i in range(4):
            y[i] = T.max(x[i], T.float32(0))

    @R.function
    def main(x: R.Tensor((4,), "float32")):
        cls = TwinKernelsPastNine
        with R.dataflow():
            a = R.call_tir(cls.relu9, (x,), out_ty=R.Tensor((4,), "float32"))
            b = R.call_tir(cls.relu10, (a,), out_ty=R.Tensor((4,), "float32"))
            R.output(b)
        return b


@I.ir_module
class TwinKernelsMerged:
    @T.prim_func(private=True)
    def relu(x: T.Buffer((4,), "float32"), y: T.Buffer((4,), "float32")):
        for i in range(4):
            y[i] = T.max(x[i], T.float32(0))

    @R.function
    def main(x: R.Tensor((4,), "float32")):
        cls = TwinKernelsMerged
        with R.dataflow():
            a = R.call_tir(cls.relu, (x,), out_ty=R.Tensor((4,), "float32"))
            b = R.call_tir(cls.relu, (a,), out_ty=R.Tensor((4,), "float32"))
            R.output(b)
        return b
