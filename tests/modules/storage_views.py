"""A packing kernel that moves no element: reshape-like, yet it writes an image."""

from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from .signatures import VDEVICES


@I.ir_module
class PackIntoImage:
    I.module_global_infos(VDEVICES)

    @T.prim_func(private=True, s_tir=True)
    def pack(x: T.Buffer((1, 8, 1, 1), "float32"), y: T.Buffer((1, 2, 1, 1, 4), "float32")):
        for n, c, h, w, b in T.grid(1, 2, 1, 1, 4):
            with T.sblock("pack"):
                vn, vc, vh, vw, vb = T.axis.remap("SSSSS", [n, c, h, w, b])
                y[vn, vc, vh, vw, vb] = x[vn, vc * 4 + vb, vh, vw]

    @R.function
    def main(x: R.Tensor((1, 8, 1, 1), "float32", vdevice="opencl:0:global")):
        cls = PackIntoImage
        with R.dataflow():
            a = R.call_tir(cls.pack, (x,), out_ty=R.Tensor((1, 2, 1, 1, 4), "float32", vdevice="opencl:1:global.texture"))
            b = R.call_tir(cls.pack, (x,), out_ty=R.Tensor((1, 2, 1, 1, 4), "float32", vdevice="opencl:0:global"))
            gv = (a, b)
            R.output(gv)
        return gv


@I.ir_module
class PackIntoImageKept:
    I.module_global_infos(VDEVICES)

    @T.prim_func(private=True, s_tir=True)
    def pack(x: T.Buffer((1, 8, 1, 1), "float32"), y: T.Buffer((1, 2, 1, 1, 4), "float32")):
        for n, c, h, w, b in T.grid(1, 2, 1, 1, 4):
            with T.sblock("pack"):
                vn, vc, vh, vw, vb = T.axis.remap("SSSSS", [n, c, h, w, b])
                y[vn, vc, vh, vw, vb] = x[vn, vc * 4 + vb, vh, vw]

    @R.function
    def main(x: R.Tensor((1, 8, 1, 1), "float32", vdevice="opencl:0:global")):
        cls = PackIntoImageKept
        with R.dataflow():
            a = R.call_tir(cls.pack, (x,), out_ty=R.Tensor((1, 2, 1, 1, 4), "float32", vdevice="opencl:1:global.texture"))
            b = R.call_tir(cls.pack, (x,), out_ty=R.Tensor((1, 2, 1, 1, 4), "float32", vdevice="opencl:0:global"))
            gv = (a, b)
            R.output(a, gv)
        return gv
