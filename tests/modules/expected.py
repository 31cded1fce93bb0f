"""What texscope's pipeline must produce, written out in full.

TVMScript cannot parse ``ty_args`` on Relax operator calls (``R.nn.conv2d``);
the expected output type is written on the binding instead, and
``conftest.with_ty_args`` copies it into ``ty_args`` before comparison.  Until
then the conv2d bindings disagree with conv2d's type inference, hence
``check_well_formed=False``; the tests check the pipeline's own output.
"""

from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

ADRENO = {
    "device": "adreno",
    "image_base_address_alignment": 64,
    "keys": ["adreno", "opencl", "gpu", "texture"],
    "kind": "opencl",
    "max_function_args": 128,
    "max_num_threads": 256,
    "max_shared_memory_per_block": 16384,
    "max_threads_per_block": 256,
    "tag": "",
    "texture_depth_limit": 2048,
    "texture_spatial_limit": 16384,
    "thread_warp_size": 1,
}


# The layout transforms of x and w write textures, conv2d reads both; conv2d's
# output feeds only the unpacking transform, which reads buffers: it is written
# global.  The PrimFuncs are texscope's gather legalization of the layout
# transforms (texscope.rewrites.legalize), right by their index maps: NCHW to
# NCHW4c reads channel 4 * c_chunk + lane, OIHW to OIHW4o output channel
# 4 * o_chunk + lane, and the unpack inverts the first.  Their numbers are
# compared with the CPU in tests/test_verify.py and on OpenCL.
@I.ir_module(check_well_formed=False)
class SeedExpected:
    I.module_attrs({"texscope_target": "opencl"})
    I.module_global_infos({"vdevice": [I.vdevice(ADRENO, 0, "global"), I.vdevice(ADRENO, 0, "global.texture-nhwc"), I.vdevice(ADRENO, 0, "global.texture-weight")]})
    @T.prim_func(private=True, s_tir=True)
    def te_layout_transform(x: T.Buffer((T.int64(2), T.int64(64), T.int64(56), T.int64(56)), "float32"), te_layout_transform: T.Buffer((T.int64(2), T.int64(16), T.int64(56), T.int64(56), T.int64(4)), "float32")):
        T.func_attr({"op_pattern": 2, "texscope_op": {"op": "relax.layout_transform"}, "tirx.noalias": True})
        # with T.sblock("root"):
        for i0, i1, i2, i3, i4 in T.grid(T.int64(2), T.int64(16), T.int64(56), T.int64(56), T.int64(4)):
            with T.sblock("te_layout_transform"):
                v_i0, v_i1, v_i2, v_i3, v_i4 = T.axis.remap("SSSSS", [i0, i1, i2, i3, i4])
                T.reads(x[v_i0, v_i1 * T.int64(4) + v_i4, v_i2, v_i3])
                T.writes(te_layout_transform[v_i0, v_i1, v_i2, v_i3, v_i4])
                te_layout_transform[v_i0, v_i1, v_i2, v_i3, v_i4] = x[v_i0, v_i1 * T.int64(4) + v_i4, v_i2, v_i3]

    @T.prim_func(private=True, s_tir=True)
    def te_layout_transform1(w: T.Buffer((T.int64(32), T.int64(64), T.int64(3), T.int64(3)), "float32"), te_layout_transform: T.Buffer((T.int64(8), T.int64(64), T.int64(3), T.int64(3), T.int64(4)), "float32")):
        T.func_attr({"op_pattern": 2, "texscope_op": {"op": "relax.layout_transform"}, "tirx.noalias": True})
        # with T.sblock("root"):
        for i0, i1, i2, i3, i4 in T.grid(T.int64(8), T.int64(64), T.int64(3), T.int64(3), T.int64(4)):
            with T.sblock("te_layout_transform"):
                v_i0, v_i1, v_i2, v_i3, v_i4 = T.axis.remap("SSSSS", [i0, i1, i2, i3, i4])
                T.reads(w[v_i0 * T.int64(4) + v_i4, v_i1, v_i2, v_i3])
                T.writes(te_layout_transform[v_i0, v_i1, v_i2, v_i3, v_i4])
                te_layout_transform[v_i0, v_i1, v_i2, v_i3, v_i4] = w[v_i0 * T.int64(4) + v_i4, v_i1, v_i2, v_i3]

    @T.prim_func(private=True, s_tir=True)
    def te_layout_transform2(lv2: T.Buffer((T.int64(2), T.int64(8), T.int64(54), T.int64(54), T.int64(4)), "float32"), te_layout_transform: T.Buffer((T.int64(2), T.int64(32), T.int64(54), T.int64(54)), "float32")):
        T.func_attr({"op_pattern": 2, "texscope_op": {"op": "relax.layout_transform"}, "tirx.noalias": True})
        # with T.sblock("root"):
        for i0, i1, i2, i3 in T.grid(T.int64(2), T.int64(32), T.int64(54), T.int64(54)):
            with T.sblock("te_layout_transform"):
                v_i0, v_i1, v_i2, v_i3 = T.axis.remap("SSSS", [i0, i1, i2, i3])
                T.reads(lv2[v_i0, v_i1 // T.int64(4), v_i2, v_i3, v_i1 % T.int64(4)])
                T.writes(te_layout_transform[v_i0, v_i1, v_i2, v_i3])
                te_layout_transform[v_i0, v_i1, v_i2, v_i3] = lv2[v_i0, v_i1 // T.int64(4), v_i2, v_i3, v_i1 % T.int64(4)]

    @R.function
    def main(x: R.Tensor((2, 64, 56, 56), dtype="float32", vdevice="opencl:0:global"), w: R.Tensor((32, 64, 3, 3), dtype="float32", vdevice="opencl:0:global")) -> R.Tensor((2, 32, 54, 54), dtype="float32", vdevice="opencl:0:global"):
        cls = SeedExpected
        with R.dataflow():
            lv = R.call_tir(cls.te_layout_transform, (x,), out_ty=R.Tensor((2, 16, 56, 56, 4), dtype="float32", vdevice="opencl:1:global.texture-nhwc"))
            lv1 = R.call_tir(cls.te_layout_transform1, (w,), out_ty=R.Tensor((8, 64, 3, 3, 4), dtype="float32", vdevice="opencl:2:global.texture-weight"))
            lv2: R.Tensor((2, 8, 54, 54, 4), dtype="float32", vdevice="opencl:0:global") = R.nn.conv2d(lv, lv1, strides=[1, 1], padding=[0, 0, 0, 0], dilation=[1, 1], groups=1, data_layout="NCHW4c", kernel_layout="OIHW4o", out_layout="NCHW4c", out_dtype="float32")
            gv = R.call_tir(cls.te_layout_transform2, (lv2,), out_ty=R.Tensor((2, 32, 54, 54), dtype="float32", vdevice="opencl:0:global"))
            R.output(gv)
        return gv


# c feeds a conv and two reductions (buffers only).  Under a profile whose
# packed-conv texture read pays for a copy (conftest.CONV_READS_PAY), c is a
# texture and both reductions share a single copy, c_global.  Both reductions'
# results unpack through one kernel.
@I.ir_module(check_well_formed=False)
class ConflictExpected:
    I.module_attrs({"texscope_target": "opencl"})
    I.module_global_infos({"vdevice": [I.vdevice(ADRENO, 0, "global"), I.vdevice(ADRENO, 0, "global.texture-weight")]})
    @T.prim_func(private=True, s_tir=True)
    def mean(c: T.Buffer((T.int64(1), T.int64(2), T.int64(16), T.int64(16), T.int64(4)), "float32"), T_divide: T.Buffer((T.int64(1), T.int64(2), T.int64(4)), "float32")):
        T.func_attr({"op_pattern": 4, "texscope_op": {"op": "relax.mean"}, "tirx.noalias": True})
        # with T.sblock("root"):
        c_red = T.sblock_alloc_buffer((T.int64(1), T.int64(2), T.int64(4)))
        for ax0, ax1, ax2, k2, k3 in T.grid(T.int64(1), T.int64(2), T.int64(4), T.int64(16), T.int64(16)):
            with T.sblock("c_red"):
                v_ax0, v_ax1, v_ax2, v_k2, v_k3 = T.axis.remap("SSSRR", [ax0, ax1, ax2, k2, k3])
                T.reads(c[v_ax0, v_ax1, v_k2, v_k3, v_ax2])
                T.writes(c_red[v_ax0, v_ax1, v_ax2])
                with T.init():
                    c_red[v_ax0, v_ax1, v_ax2] = T.float32(0.0)
                c_red[v_ax0, v_ax1, v_ax2] = c_red[v_ax0, v_ax1, v_ax2] + c[v_ax0, v_ax1, v_k2, v_k3, v_ax2]
        for ax0, ax1, ax2 in T.grid(T.int64(1), T.int64(2), T.int64(4)):
            with T.sblock("T_divide"):
                v_ax0, v_ax1, v_ax2 = T.axis.remap("SSS", [ax0, ax1, ax2])
                T.reads(c_red[v_ax0, v_ax1, v_ax2])
                T.writes(T_divide[v_ax0, v_ax1, v_ax2])
                T_divide[v_ax0, v_ax1, v_ax2] = c_red[v_ax0, v_ax1, v_ax2] / T.float32(256.0)

    @T.prim_func(private=True, s_tir=True)
    def sum(c: T.Buffer((T.int64(1), T.int64(2), T.int64(16), T.int64(16), T.int64(4)), "float32"), c_red: T.Buffer((T.int64(1), T.int64(2), T.int64(4)), "float32")):
        T.func_attr({"op_pattern": 3, "texscope_op": {"op": "relax.sum"}, "tirx.noalias": True})
        # with T.sblock("root"):
        for ax0, ax1, ax2, k2, k3 in T.grid(T.int64(1), T.int64(2), T.int64(4), T.int64(16), T.int64(16)):
            with T.sblock("c_red"):
                v_ax0, v_ax1, v_ax2, v_k2, v_k3 = T.axis.remap("SSSRR", [ax0, ax1, ax2, k2, k3])
                T.reads(c[v_ax0, v_ax1, v_k2, v_k3, v_ax2])
                T.writes(c_red[v_ax0, v_ax1, v_ax2])
                with T.init():
                    c_red[v_ax0, v_ax1, v_ax2] = T.float32(0.0)
                c_red[v_ax0, v_ax1, v_ax2] = c_red[v_ax0, v_ax1, v_ax2] + c[v_ax0, v_ax1, v_k2, v_k3, v_ax2]

    @T.prim_func(private=True, s_tir=True)
    def te_layout_transform(x: T.Buffer((T.int64(1), T.int64(8), T.int64(16), T.int64(16)), "float32"), te_layout_transform: T.Buffer((T.int64(1), T.int64(2), T.int64(16), T.int64(16), T.int64(4)), "float32")):
        T.func_attr({"op_pattern": 2, "texscope_op": {"op": "relax.layout_transform"}, "tirx.noalias": True})
        # with T.sblock("root"):
        for i0, i1, i2, i3, i4 in T.grid(T.int64(1), T.int64(2), T.int64(16), T.int64(16), T.int64(4)):
            with T.sblock("te_layout_transform"):
                v_i0, v_i1, v_i2, v_i3, v_i4 = T.axis.remap("SSSSS", [i0, i1, i2, i3, i4])
                T.reads(x[v_i0, v_i1 * T.int64(4) + v_i4, v_i2, v_i3])
                T.writes(te_layout_transform[v_i0, v_i1, v_i2, v_i3, v_i4])
                te_layout_transform[v_i0, v_i1, v_i2, v_i3, v_i4] = x[v_i0, v_i1 * T.int64(4) + v_i4, v_i2, v_i3]

    @T.prim_func(private=True, s_tir=True)
    def te_layout_transform1(w: T.Buffer((T.int64(8), T.int64(8), T.int64(3), T.int64(3)), "float32"), te_layout_transform: T.Buffer((T.int64(2), T.int64(8), T.int64(3), T.int64(3), T.int64(4)), "float32")):
        T.func_attr({"op_pattern": 2, "texscope_op": {"op": "relax.layout_transform"}, "tirx.noalias": True})
        # with T.sblock("root"):
        for i0, i1, i2, i3, i4 in T.grid(T.int64(2), T.int64(8), T.int64(3), T.int64(3), T.int64(4)):
            with T.sblock("te_layout_transform"):
                v_i0, v_i1, v_i2, v_i3, v_i4 = T.axis.remap("SSSSS", [i0, i1, i2, i3, i4])
                T.reads(w[v_i0 * T.int64(4) + v_i4, v_i1, v_i2, v_i3])
                T.writes(te_layout_transform[v_i0, v_i1, v_i2, v_i3, v_i4])
                te_layout_transform[v_i0, v_i1, v_i2, v_i3, v_i4] = w[v_i0 * T.int64(4) + v_i4, v_i1, v_i2, v_i3]

    @T.prim_func(private=True, s_tir=True)
    def te_layout_transform2(k: T.Buffer((T.int64(8), T.int64(8), T.int64(1), T.int64(1)), "float32"), te_layout_transform: T.Buffer((T.int64(2), T.int64(8), T.int64(1), T.int64(1), T.int64(4)), "float32")):
        T.func_attr({"op_pattern": 2, "texscope_op": {"op": "relax.layout_transform"}, "tirx.noalias": True})
        # with T.sblock("root"):
        for i0, i1, i2, i3, i4 in T.grid(T.int64(2), T.int64(8), T.int64(1), T.int64(1), T.int64(4)):
            with T.sblock("te_layout_transform"):
                v_i0, v_i1, v_i2, v_i3, v_i4 = T.axis.remap("SSSSS", [i0, i1, i2, i3, i4])
                T.reads(k[v_i0 * T.int64(4) + v_i4, v_i1, v_i2, v_i3])
                T.writes(te_layout_transform[v_i0, v_i1, v_i2, v_i3, v_i4])
                te_layout_transform[v_i0, v_i1, v_i2, v_i3, v_i4] = k[v_i0 * T.int64(4) + v_i4, v_i1, v_i2, v_i3]

    @T.prim_func(private=True, s_tir=True)
    def te_layout_transform3(p: T.Buffer((T.int64(1), T.int64(2), T.int64(16), T.int64(16), T.int64(4)), "float32"), te_layout_transform: T.Buffer((T.int64(1), T.int64(8), T.int64(16), T.int64(16)), "float32")):
        T.func_attr({"op_pattern": 2, "texscope_op": {"op": "relax.layout_transform"}, "tirx.noalias": True})
        # with T.sblock("root"):
        for i0, i1, i2, i3 in T.grid(T.int64(1), T.int64(8), T.int64(16), T.int64(16)):
            with T.sblock("te_layout_transform"):
                v_i0, v_i1, v_i2, v_i3 = T.axis.remap("SSSS", [i0, i1, i2, i3])
                T.reads(p[v_i0, v_i1 // T.int64(4), v_i2, v_i3, v_i1 % T.int64(4)])
                T.writes(te_layout_transform[v_i0, v_i1, v_i2, v_i3])
                te_layout_transform[v_i0, v_i1, v_i2, v_i3] = p[v_i0, v_i1 // T.int64(4), v_i2, v_i3, v_i1 % T.int64(4)]

    @T.prim_func(private=True, s_tir=True)
    def te_layout_transform4(m: T.Buffer((T.int64(1), T.int64(2), T.int64(4)), "float32"), te_layout_transform: T.Buffer((T.int64(1), T.int64(8)), "float32")):
        T.func_attr({"op_pattern": 2, "texscope_op": {"op": "relax.layout_transform"}, "tirx.noalias": True})
        # with T.sblock("root"):
        for i0, i1 in T.grid(T.int64(1), T.int64(8)):
            with T.sblock("te_layout_transform"):
                v_i0, v_i1 = T.axis.remap("SS", [i0, i1])
                T.reads(m[v_i0, v_i1 // T.int64(4), v_i1 % T.int64(4)])
                T.writes(te_layout_transform[v_i0, v_i1])
                te_layout_transform[v_i0, v_i1] = m[v_i0, v_i1 // T.int64(4), v_i1 % T.int64(4)]

    @R.function
    def main(x: R.Tensor((1, 8, 16, 16), dtype="float32", vdevice="opencl:0:global"), w: R.Tensor((8, 8, 3, 3), dtype="float32", vdevice="opencl:0:global"), k: R.Tensor((8, 8, 1, 1), dtype="float32", vdevice="opencl:0:global")) -> R.Tuple(R.Tensor((1, 8, 16, 16), dtype="float32", vdevice="opencl:0:global"), R.Tensor((1, 8), dtype="float32", vdevice="opencl:0:global"), R.Tensor((1, 8), dtype="float32", vdevice="opencl:0:global")):
        cls = ConflictExpected
        with R.dataflow():
            lv = R.call_tir(cls.te_layout_transform, (x,), out_ty=R.Tensor((1, 2, 16, 16, 4), dtype="float32", vdevice="opencl:1:global.texture-weight"))
            lv1 = R.call_tir(cls.te_layout_transform1, (w,), out_ty=R.Tensor((2, 8, 3, 3, 4), dtype="float32", vdevice="opencl:1:global.texture-weight"))
            c: R.Tensor((1, 2, 16, 16, 4), dtype="float32", vdevice="opencl:1:global.texture-weight") = R.nn.conv2d(lv, lv1, strides=[1, 1], padding=[1, 1, 1, 1], dilation=[1, 1], groups=1, data_layout="NCHW4c", kernel_layout="OIHW4o", out_layout="NCHW4c", out_dtype=None)
            lv2 = R.call_tir(cls.te_layout_transform2, (k,), out_ty=R.Tensor((2, 8, 1, 1, 4), dtype="float32", vdevice="opencl:1:global.texture-weight"))
            p: R.Tensor((1, 2, 16, 16, 4), dtype="float32", vdevice="opencl:0:global") = R.nn.conv2d(c, lv2, strides=[1, 1], padding=[0, 0, 0, 0], dilation=[1, 1], groups=1, data_layout="NCHW4c", kernel_layout="OIHW4o", out_layout="NCHW4c", out_dtype=None)
            c_global: R.Tensor((1, 2, 16, 16, 4), dtype="float32", vdevice="opencl:0:global") = R.to_vdevice(c, dst_vdevice="opencl:0:global")
            m = R.call_tir(cls.mean, (c_global,), out_ty=R.Tensor((1, 2, 4), dtype="float32", vdevice="opencl:0:global"))
            s = R.call_tir(cls.sum, (c_global,), out_ty=R.Tensor((1, 2, 4), dtype="float32", vdevice="opencl:0:global"))
            lv3 = R.call_tir(cls.te_layout_transform3, (p,), out_ty=R.Tensor((1, 8, 16, 16), dtype="float32", vdevice="opencl:0:global"))
            lv4 = R.call_tir(cls.te_layout_transform4, (m,), out_ty=R.Tensor((1, 8), dtype="float32", vdevice="opencl:0:global"))
            lv5 = R.call_tir(cls.te_layout_transform4, (s,), out_ty=R.Tensor((1, 8), dtype="float32", vdevice="opencl:0:global"))
            gv: R.Tuple(R.Tensor((1, 8, 16, 16), dtype="float32", vdevice="opencl:0:global"), R.Tensor((1, 8), dtype="float32", vdevice="opencl:0:global"), R.Tensor((1, 8), dtype="float32", vdevice="opencl:0:global")) = lv3, lv4, lv5
            R.output(gv)
        return gv


# The same module with the Adreno defaults since a packed conv may read its
# data from a buffer: a texture of c would save p's read 1.0 x 8 KiB, its copy
# to a buffer for m and s costs 8 KiB and a launch (64 KiB's worth), so c stays
# a buffer that p, m and s all read; no copy.  The weights are still textures.
@I.ir_module(check_well_formed=False)
class ConflictReadsBufferExpected:
    I.module_attrs({"texscope_target": "opencl"})
    I.module_global_infos({"vdevice": [I.vdevice(ADRENO, 0, "global"), I.vdevice(ADRENO, 0, "global.texture-weight")]})
    @T.prim_func(private=True, s_tir=True)
    def mean(c: T.Buffer((T.int64(1), T.int64(2), T.int64(16), T.int64(16), T.int64(4)), "float32"), T_divide: T.Buffer((T.int64(1), T.int64(2), T.int64(4)), "float32")):
        T.func_attr({"op_pattern": 4, "texscope_op": {"op": "relax.mean"}, "tirx.noalias": True})
        # with T.sblock("root"):
        c_red = T.sblock_alloc_buffer((T.int64(1), T.int64(2), T.int64(4)))
        for ax0, ax1, ax2, k2, k3 in T.grid(T.int64(1), T.int64(2), T.int64(4), T.int64(16), T.int64(16)):
            with T.sblock("c_red"):
                v_ax0, v_ax1, v_ax2, v_k2, v_k3 = T.axis.remap("SSSRR", [ax0, ax1, ax2, k2, k3])
                T.reads(c[v_ax0, v_ax1, v_k2, v_k3, v_ax2])
                T.writes(c_red[v_ax0, v_ax1, v_ax2])
                with T.init():
                    c_red[v_ax0, v_ax1, v_ax2] = T.float32(0.0)
                c_red[v_ax0, v_ax1, v_ax2] = c_red[v_ax0, v_ax1, v_ax2] + c[v_ax0, v_ax1, v_k2, v_k3, v_ax2]
        for ax0, ax1, ax2 in T.grid(T.int64(1), T.int64(2), T.int64(4)):
            with T.sblock("T_divide"):
                v_ax0, v_ax1, v_ax2 = T.axis.remap("SSS", [ax0, ax1, ax2])
                T.reads(c_red[v_ax0, v_ax1, v_ax2])
                T.writes(T_divide[v_ax0, v_ax1, v_ax2])
                T_divide[v_ax0, v_ax1, v_ax2] = c_red[v_ax0, v_ax1, v_ax2] / T.float32(256.0)

    @T.prim_func(private=True, s_tir=True)
    def sum(c: T.Buffer((T.int64(1), T.int64(2), T.int64(16), T.int64(16), T.int64(4)), "float32"), c_red: T.Buffer((T.int64(1), T.int64(2), T.int64(4)), "float32")):
        T.func_attr({"op_pattern": 3, "texscope_op": {"op": "relax.sum"}, "tirx.noalias": True})
        # with T.sblock("root"):
        for ax0, ax1, ax2, k2, k3 in T.grid(T.int64(1), T.int64(2), T.int64(4), T.int64(16), T.int64(16)):
            with T.sblock("c_red"):
                v_ax0, v_ax1, v_ax2, v_k2, v_k3 = T.axis.remap("SSSRR", [ax0, ax1, ax2, k2, k3])
                T.reads(c[v_ax0, v_ax1, v_k2, v_k3, v_ax2])
                T.writes(c_red[v_ax0, v_ax1, v_ax2])
                with T.init():
                    c_red[v_ax0, v_ax1, v_ax2] = T.float32(0.0)
                c_red[v_ax0, v_ax1, v_ax2] = c_red[v_ax0, v_ax1, v_ax2] + c[v_ax0, v_ax1, v_k2, v_k3, v_ax2]

    @T.prim_func(private=True, s_tir=True)
    def te_layout_transform(x: T.Buffer((T.int64(1), T.int64(8), T.int64(16), T.int64(16)), "float32"), te_layout_transform: T.Buffer((T.int64(1), T.int64(2), T.int64(16), T.int64(16), T.int64(4)), "float32")):
        T.func_attr({"op_pattern": 2, "texscope_op": {"op": "relax.layout_transform"}, "tirx.noalias": True})
        # with T.sblock("root"):
        for i0, i1, i2, i3, i4 in T.grid(T.int64(1), T.int64(2), T.int64(16), T.int64(16), T.int64(4)):
            with T.sblock("te_layout_transform"):
                v_i0, v_i1, v_i2, v_i3, v_i4 = T.axis.remap("SSSSS", [i0, i1, i2, i3, i4])
                T.reads(x[v_i0, v_i1 * T.int64(4) + v_i4, v_i2, v_i3])
                T.writes(te_layout_transform[v_i0, v_i1, v_i2, v_i3, v_i4])
                te_layout_transform[v_i0, v_i1, v_i2, v_i3, v_i4] = x[v_i0, v_i1 * T.int64(4) + v_i4, v_i2, v_i3]

    @T.prim_func(private=True, s_tir=True)
    def te_layout_transform1(w: T.Buffer((T.int64(8), T.int64(8), T.int64(3), T.int64(3)), "float32"), te_layout_transform: T.Buffer((T.int64(2), T.int64(8), T.int64(3), T.int64(3), T.int64(4)), "float32")):
        T.func_attr({"op_pattern": 2, "texscope_op": {"op": "relax.layout_transform"}, "tirx.noalias": True})
        # with T.sblock("root"):
        for i0, i1, i2, i3, i4 in T.grid(T.int64(2), T.int64(8), T.int64(3), T.int64(3), T.int64(4)):
            with T.sblock("te_layout_transform"):
                v_i0, v_i1, v_i2, v_i3, v_i4 = T.axis.remap("SSSSS", [i0, i1, i2, i3, i4])
                T.reads(w[v_i0 * T.int64(4) + v_i4, v_i1, v_i2, v_i3])
                T.writes(te_layout_transform[v_i0, v_i1, v_i2, v_i3, v_i4])
                te_layout_transform[v_i0, v_i1, v_i2, v_i3, v_i4] = w[v_i0 * T.int64(4) + v_i4, v_i1, v_i2, v_i3]

    @T.prim_func(private=True, s_tir=True)
    def te_layout_transform2(k: T.Buffer((T.int64(8), T.int64(8), T.int64(1), T.int64(1)), "float32"), te_layout_transform: T.Buffer((T.int64(2), T.int64(8), T.int64(1), T.int64(1), T.int64(4)), "float32")):
        T.func_attr({"op_pattern": 2, "texscope_op": {"op": "relax.layout_transform"}, "tirx.noalias": True})
        # with T.sblock("root"):
        for i0, i1, i2, i3, i4 in T.grid(T.int64(2), T.int64(8), T.int64(1), T.int64(1), T.int64(4)):
            with T.sblock("te_layout_transform"):
                v_i0, v_i1, v_i2, v_i3, v_i4 = T.axis.remap("SSSSS", [i0, i1, i2, i3, i4])
                T.reads(k[v_i0 * T.int64(4) + v_i4, v_i1, v_i2, v_i3])
                T.writes(te_layout_transform[v_i0, v_i1, v_i2, v_i3, v_i4])
                te_layout_transform[v_i0, v_i1, v_i2, v_i3, v_i4] = k[v_i0 * T.int64(4) + v_i4, v_i1, v_i2, v_i3]

    @T.prim_func(private=True, s_tir=True)
    def te_layout_transform3(p: T.Buffer((T.int64(1), T.int64(2), T.int64(16), T.int64(16), T.int64(4)), "float32"), te_layout_transform: T.Buffer((T.int64(1), T.int64(8), T.int64(16), T.int64(16)), "float32")):
        T.func_attr({"op_pattern": 2, "texscope_op": {"op": "relax.layout_transform"}, "tirx.noalias": True})
        # with T.sblock("root"):
        for i0, i1, i2, i3 in T.grid(T.int64(1), T.int64(8), T.int64(16), T.int64(16)):
            with T.sblock("te_layout_transform"):
                v_i0, v_i1, v_i2, v_i3 = T.axis.remap("SSSS", [i0, i1, i2, i3])
                T.reads(p[v_i0, v_i1 // T.int64(4), v_i2, v_i3, v_i1 % T.int64(4)])
                T.writes(te_layout_transform[v_i0, v_i1, v_i2, v_i3])
                te_layout_transform[v_i0, v_i1, v_i2, v_i3] = p[v_i0, v_i1 // T.int64(4), v_i2, v_i3, v_i1 % T.int64(4)]

    @T.prim_func(private=True, s_tir=True)
    def te_layout_transform4(m: T.Buffer((T.int64(1), T.int64(2), T.int64(4)), "float32"), te_layout_transform: T.Buffer((T.int64(1), T.int64(8)), "float32")):
        T.func_attr({"op_pattern": 2, "texscope_op": {"op": "relax.layout_transform"}, "tirx.noalias": True})
        # with T.sblock("root"):
        for i0, i1 in T.grid(T.int64(1), T.int64(8)):
            with T.sblock("te_layout_transform"):
                v_i0, v_i1 = T.axis.remap("SS", [i0, i1])
                T.reads(m[v_i0, v_i1 // T.int64(4), v_i1 % T.int64(4)])
                T.writes(te_layout_transform[v_i0, v_i1])
                te_layout_transform[v_i0, v_i1] = m[v_i0, v_i1 // T.int64(4), v_i1 % T.int64(4)]

    @R.function
    def main(x: R.Tensor((1, 8, 16, 16), dtype="float32", vdevice="opencl:0:global"), w: R.Tensor((8, 8, 3, 3), dtype="float32", vdevice="opencl:0:global"), k: R.Tensor((8, 8, 1, 1), dtype="float32", vdevice="opencl:0:global")) -> R.Tuple(R.Tensor((1, 8, 16, 16), dtype="float32", vdevice="opencl:0:global"), R.Tensor((1, 8), dtype="float32", vdevice="opencl:0:global"), R.Tensor((1, 8), dtype="float32", vdevice="opencl:0:global")):
        cls = ConflictReadsBufferExpected
        with R.dataflow():
            lv = R.call_tir(cls.te_layout_transform, (x,), out_ty=R.Tensor((1, 2, 16, 16, 4), dtype="float32", vdevice="opencl:1:global.texture-weight"))
            lv1 = R.call_tir(cls.te_layout_transform1, (w,), out_ty=R.Tensor((2, 8, 3, 3, 4), dtype="float32", vdevice="opencl:1:global.texture-weight"))
            c: R.Tensor((1, 2, 16, 16, 4), dtype="float32", vdevice="opencl:0:global") = R.nn.conv2d(lv, lv1, strides=[1, 1], padding=[1, 1, 1, 1], dilation=[1, 1], groups=1, data_layout="NCHW4c", kernel_layout="OIHW4o", out_layout="NCHW4c", out_dtype=None)
            lv2 = R.call_tir(cls.te_layout_transform2, (k,), out_ty=R.Tensor((2, 8, 1, 1, 4), dtype="float32", vdevice="opencl:1:global.texture-weight"))
            p: R.Tensor((1, 2, 16, 16, 4), dtype="float32", vdevice="opencl:0:global") = R.nn.conv2d(c, lv2, strides=[1, 1], padding=[0, 0, 0, 0], dilation=[1, 1], groups=1, data_layout="NCHW4c", kernel_layout="OIHW4o", out_layout="NCHW4c", out_dtype=None)
            m = R.call_tir(cls.mean, (c,), out_ty=R.Tensor((1, 2, 4), dtype="float32", vdevice="opencl:0:global"))
            s = R.call_tir(cls.sum, (c,), out_ty=R.Tensor((1, 2, 4), dtype="float32", vdevice="opencl:0:global"))
            lv3 = R.call_tir(cls.te_layout_transform3, (p,), out_ty=R.Tensor((1, 8, 16, 16), dtype="float32", vdevice="opencl:0:global"))
            lv4 = R.call_tir(cls.te_layout_transform4, (m,), out_ty=R.Tensor((1, 8), dtype="float32", vdevice="opencl:0:global"))
            lv5 = R.call_tir(cls.te_layout_transform4, (s,), out_ty=R.Tensor((1, 8), dtype="float32", vdevice="opencl:0:global"))
            gv: R.Tuple(R.Tensor((1, 8, 16, 16), dtype="float32", vdevice="opencl:0:global"), R.Tensor((1, 8), dtype="float32", vdevice="opencl:0:global"), R.Tensor((1, 8), dtype="float32", vdevice="opencl:0:global")) = lv3, lv4, lv5
            R.output(gv)
        return gv
