"""Planned-memory cases: a small tensor TVM's planner puts in a big storage."""

from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

ADRENO = {"kind": "opencl", "keys": ["adreno", "opencl", "gpu", "texture"], "device": "adreno"}
BIG = (1, 1, 8, 16, 4)  # an image of 8 rows of 16 float32 texels: 8 x 256 bytes
SMALL = (1, 1, 4, 4, 4)  # 4 rows of 4 texels, 64 bytes each: 256 bytes


@I.ir_module(check_well_formed=False)
class SmallAfterBig:
    """a, b, d, e are images of 2048 bytes, c one of 256 that lives from
    after a dies to the end: TVM's planner gives c a's freed storage, and d
    then needs a third big one.  As CallTIRRewrite leaves a module."""

    I.module_global_infos({"vdevice": [I.vdevice(ADRENO, 0, "global"),
                                       I.vdevice(ADRENO, 0, "global.texture")]})

    @T.prim_func
    def scale(x: T.Buffer(BIG, "float32"), y: T.Buffer(BIG, "float32")):
        for i0, i1, i2, i3, i4 in T.grid(*BIG):
            with T.sblock("y"):
                y[i0, i1, i2, i3, i4] = x[i0, i1, i2, i3, i4] * T.float32(0.5) + T.float32(1)

    @T.prim_func
    def corner(x: T.Buffer(BIG, "float32"), y: T.Buffer(SMALL, "float32")):
        for i0, i1, i2, i3, i4 in T.grid(*SMALL):
            with T.sblock("y"):
                y[i0, i1, i2, i3, i4] = x[i0, i1, i2 * 2, i3 * 4, i4]

    @T.prim_func
    def add_corner(x: T.Buffer(BIG, "float32"), c: T.Buffer(SMALL, "float32"),
                   y: T.Buffer(SMALL, "float32")):
        for i0, i1, i2, i3, i4 in T.grid(*SMALL):
            with T.sblock("y"):
                y[i0, i1, i2, i3, i4] = x[i0, i1, i2, i3, i4] - c[i0, i1, i2, i3, i4]

    @R.function
    def main(x: R.Tensor(BIG, "float32")) -> R.Tensor(SMALL, "float32"):
        R.func_attr({"relax.force_pure": True})
        cls = SmallAfterBig
        a = R.builtin.alloc_tensor(R.shape(BIG), R.dtype("float32"), R.prim_value(1), R.str("global.texture"))
        _0 = cls.scale(x, a)
        b = R.builtin.alloc_tensor(R.shape(BIG), R.dtype("float32"), R.prim_value(1), R.str("global.texture"))
        _1 = cls.scale(a, b)
        c = R.builtin.alloc_tensor(R.shape(SMALL), R.dtype("float32"), R.prim_value(1), R.str("global.texture"))
        _2 = cls.corner(b, c)
        d = R.builtin.alloc_tensor(R.shape(BIG), R.dtype("float32"), R.prim_value(1), R.str("global.texture"))
        _3 = cls.scale(b, d)
        e = R.builtin.alloc_tensor(R.shape(BIG), R.dtype("float32"), R.prim_value(1), R.str("global.texture"))
        _4 = cls.scale(d, e)
        y = R.builtin.alloc_tensor(R.shape(SMALL), R.dtype("float32"), R.prim_value(0), R.str("global"))
        _5 = cls.add_corner(e, c, y)
        return y


@I.ir_module(check_well_formed=False)
class LateShrinks:
    """b and c are read once each, by kernels that shrink them to a corner,
    but both shrinks come last: b is alive beside a and c."""

    @T.prim_func
    def scale(x: T.Buffer(BIG, "float32"), y: T.Buffer(BIG, "float32")):
        for i0, i1, i2, i3, i4 in T.grid(*BIG):
            with T.sblock("y"):
                y[i0, i1, i2, i3, i4] = x[i0, i1, i2, i3, i4] * T.float32(0.5) + T.float32(1)

    @T.prim_func
    def corner(x: T.Buffer(BIG, "float32"), y: T.Buffer(SMALL, "float32")):
        for i0, i1, i2, i3, i4 in T.grid(*SMALL):
            with T.sblock("y"):
                y[i0, i1, i2, i3, i4] = x[i0, i1, i2 * 2, i3 * 4, i4]

    @R.function
    def main(x: R.Tensor(BIG, "float32")):
        cls = LateShrinks
        with R.dataflow():
            a = R.call_tir(cls.scale, (x,), out_ty=R.Tensor(BIG, "float32"))
            b = R.call_tir(cls.scale, (a,), out_ty=R.Tensor(BIG, "float32"))
            c = R.call_tir(cls.scale, (a,), out_ty=R.Tensor(BIG, "float32"))
            b2 = R.call_tir(cls.corner, (b,), out_ty=R.Tensor(SMALL, "float32"))
            c2 = R.call_tir(cls.corner, (c,), out_ty=R.Tensor(SMALL, "float32"))
            out = (b2, c2)
            R.output(out)
        return out
