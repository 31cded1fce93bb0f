"""One PrimFunc called with two storage signatures, and the module after
``SplitPrimFuncsBySignature``: the second signature calls a tagged copy."""

from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from .expected import ADRENO

VDEVICES = {"vdevice": [I.vdevice(ADRENO, 0, "global"), I.vdevice(ADRENO, 0, "global.texture")]}


@I.ir_module
class TwoSignatures:
    I.module_global_infos(VDEVICES)

    @T.prim_func(private=True, s_tir=True)
    def double(x: T.Buffer((1, 1, 2, 2, 4), "float32"), y: T.Buffer((1, 1, 2, 2, 4), "float32")):
        for n, c, h, w, b in T.grid(1, 1, 2, 2, 4):
            with T.sblock("double"):
                vn, vc, vh, vw, vb = T.axis.remap("SSSSS", [n, c, h, w, b])
                y[vn, vc, vh, vw, vb] = x[vn, vc, vh, vw, vb] * T.float32(2)

    @R.function
    def main(x: R.Tensor((1, 1, 2, 2, 4), "float32", vdevice="opencl:0:global")):
        cls = TwoSignatures
        with R.dataflow():
            a = R.call_tir(cls.double, (x,), out_ty=R.Tensor((1, 1, 2, 2, 4), "float32", vdevice="opencl:1:global.texture"))
            b = R.call_tir(cls.double, (a,), out_ty=R.Tensor((1, 1, 2, 2, 4), "float32", vdevice="opencl:0:global"))
            c = R.call_tir(cls.double, (x,), out_ty=R.Tensor((1, 1, 2, 2, 4), "float32", vdevice="opencl:1:global.texture"))
            gv = (b, c)
            R.output(gv)
        return gv


@I.ir_module
class TwoSignaturesSplit:
    I.module_global_infos(VDEVICES)

    @T.prim_func(private=True, s_tir=True)
    def double(x: T.Buffer((1, 1, 2, 2, 4), "float32"), y: T.Buffer((1, 1, 2, 2, 4), "float32")):
        for n, c, h, w, b in T.grid(1, 1, 2, 2, 4):
            with T.sblock("double"):
                vn, vc, vh, vw, vb = T.axis.remap("SSSSS", [n, c, h, w, b])
                y[vn, vc, vh, vw, vb] = x[vn, vc, vh, vw, vb] * T.float32(2)

    @T.prim_func(private=True, s_tir=True)
    def double1(x: T.Buffer((1, 1, 2, 2, 4), "float32"), y: T.Buffer((1, 1, 2, 2, 4), "float32")):
        T.func_attr({"texscope.storage_signature": "global.texture,global"})
        for n, c, h, w, b in T.grid(1, 1, 2, 2, 4):
            with T.sblock("double"):
                vn, vc, vh, vw, vb = T.axis.remap("SSSSS", [n, c, h, w, b])
                y[vn, vc, vh, vw, vb] = x[vn, vc, vh, vw, vb] * T.float32(2)

    @R.function
    def main(x: R.Tensor((1, 1, 2, 2, 4), "float32", vdevice="opencl:0:global")):
        cls = TwoSignaturesSplit
        with R.dataflow():
            a = R.call_tir(cls.double, (x,), out_ty=R.Tensor((1, 1, 2, 2, 4), "float32", vdevice="opencl:1:global.texture"))
            b = R.call_tir(cls.double1, (a,), out_ty=R.Tensor((1, 1, 2, 2, 4), "float32", vdevice="opencl:0:global"))
            c = R.call_tir(cls.double, (x,), out_ty=R.Tensor((1, 1, 2, 2, 4), "float32", vdevice="opencl:1:global.texture"))
            gv = (b, c)
            R.output(gv)
        return gv
