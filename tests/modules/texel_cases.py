"""Kernels that write one texture: pools between convs, a channel-padded
stem, layout transforms to legalize, a conv whose epilogue reads its input."""

from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T


@I.ir_module
class PoolsBetweenConvs:
    """Every pool's output feeds a conv, so each pool writes a texture."""

    @R.function
    def main(
        x: R.Tensor((1, 8, 20, 20), "float32"),
        w1: R.Tensor((8, 8, 3, 3), "float32"),
        w2: R.Tensor((8, 8, 3, 3), "float32"),
        w3: R.Tensor((8, 8, 1, 1), "float32"),
    ):
        with R.dataflow():
            c1 = R.nn.conv2d(x, w1, padding=(1, 1))
            p1 = R.nn.max_pool2d(c1, pool_size=(3, 3), strides=(2, 2), padding=(1, 1))
            c2 = R.nn.conv2d(p1, w2, padding=(1, 1))
            p2 = R.nn.avg_pool2d(c2, pool_size=(3, 3), strides=(2, 2), padding=(1, 1),
                                 count_include_pad=False)
            c3 = R.nn.conv2d(p2, w3)
            p3 = R.nn.adaptive_avg_pool2d(c3, output_size=(1, 1))
            gv = R.nn.conv2d(p3, w3)
            R.output(gv)
        return gv


@I.ir_module
class RGBStem:
    """Three input channels: padded to four and packed by one kernel."""

    @R.function
    def main(x: R.Tensor((1, 3, 16, 16), "float32"), w: R.Tensor((8, 3, 3, 3), "float32")):
        with R.dataflow():
            c = R.nn.conv2d(x, w, strides=(2, 2), padding=(1, 1))
            gv = R.nn.relu(c)
            R.output(gv)
        return gv


@I.ir_module
class Pack:
    @R.function
    def main(x: R.Tensor((1, 8, 2, 2), "float32")):
        gv = R.layout_transform(x, index_map=lambda n, c, h, w: (n, c // 4, h, w, c % 4))
        return gv


@I.ir_module
class PackGathered:
    @T.prim_func(private=True, s_tir=True)
    def te_layout_transform(x: T.Buffer((T.int64(1), T.int64(8), T.int64(2), T.int64(2)), "float32"), te_layout_transform: T.Buffer((T.int64(1), T.int64(2), T.int64(2), T.int64(2), T.int64(4)), "float32")):
        T.func_attr({"tirx.noalias": True})
        for i0, i1, i2, i3, i4 in T.grid(T.int64(1), T.int64(2), T.int64(2), T.int64(2), T.int64(4)):
            with T.sblock("te_layout_transform"):
                v_i0, v_i1, v_i2, v_i3, v_i4 = T.axis.remap("SSSSS", [i0, i1, i2, i3, i4])
                T.reads(x[v_i0, v_i1 * T.int64(4) + v_i4, v_i2, v_i3])
                T.writes(te_layout_transform[v_i0, v_i1, v_i2, v_i3, v_i4])
                te_layout_transform[v_i0, v_i1, v_i2, v_i3, v_i4] = x[v_i0, v_i1 * T.int64(4) + v_i4, v_i2, v_i3]

    @R.function
    def main(x: R.Tensor((1, 8, 2, 2), "float32")) -> R.Tensor((1, 2, 2, 2, 4), "float32"):
        cls = PackGathered
        gv = R.call_tir(cls.te_layout_transform, (x,), out_ty=R.Tensor((1, 2, 2, 2, 4), "float32"))
        return gv


@I.ir_module
class PackPadded:
    """Six channels into two texels: the map pads, TVM's legalization stays."""

    @R.function
    def main(x: R.Tensor((1, 6, 2, 2), "float32")):
        gv = R.layout_transform(x, index_map=lambda n, c, h, w: (n, c // 4, h, w, c % 4),
                                pad_value=0.0)
        return gv


@I.ir_module
class MaxPoolToTexture:
    """A padded, strided NCHW4c max pool reading and writing textures."""

    @T.prim_func(private=True, s_tir=True)
    def max_pool2d(x: T.Buffer((T.int64(1), T.int64(1), T.int64(4), T.int64(4), T.int64(4)), "float32", scope="global.texture"), pool_max: T.Buffer((T.int64(1), T.int64(1), T.int64(2), T.int64(2), T.int64(4)), "float32", scope="global.texture")):
        T.func_attr({"tirx.noalias": True})
        pad_temp = T.sblock_alloc_buffer((T.int64(1), T.int64(1), T.int64(6), T.int64(6), T.int64(4)))
        for ax0, ax1, ax2, ax3, ax4 in T.grid(T.int64(1), T.int64(1), T.int64(6), T.int64(6), T.int64(4)):
            with T.sblock("pad_temp"):
                v0, v1, v2, v3, v4 = T.axis.remap("SSSSS", [ax0, ax1, ax2, ax3, ax4])
                T.reads(x[v0, v1, v2 - T.int64(1), v3 - T.int64(1), v4])
                T.writes(pad_temp[v0, v1, v2, v3, v4])
                pad_temp[v0, v1, v2, v3, v4] = T.if_then_else(T.int64(1) <= v2 and v2 < T.int64(5) and T.int64(1) <= v3 and v3 < T.int64(5), x[v0, v1, v2 - T.int64(1), v3 - T.int64(1), v4], T.float32(-3.4e38))
        for ax0, ax1, ax2, ax3, ax4, rv0, rv1 in T.grid(T.int64(1), T.int64(1), T.int64(2), T.int64(2), T.int64(4), T.int64(3), T.int64(3)):
            with T.sblock("pool_max"):
                v0, v1, v2, v3, v4, r0, r1 = T.axis.remap("SSSSSRR", [ax0, ax1, ax2, ax3, ax4, rv0, rv1])
                T.reads(pad_temp[v0, v1, v2 * T.int64(2) + r0, v3 * T.int64(2) + r1, v4])
                T.writes(pool_max[v0, v1, v2, v3, v4])
                with T.init():
                    pool_max[v0, v1, v2, v3, v4] = T.float32(-3.4e38)
                pool_max[v0, v1, v2, v3, v4] = T.max(pool_max[v0, v1, v2, v3, v4], pad_temp[v0, v1, v2 * T.int64(2) + r0, v3 * T.int64(2) + r1, v4])


# One thread per output texel (one block of the four); the 3x3 window walked
# outside the four lanes, so each step reads a whole texel and keeps four
# maxima in registers; one vector store of the texel.
@I.ir_module
class MaxPoolScheduled:
    @T.prim_func(private=True, s_tir=True)
    def max_pool2d(x: T.Buffer((T.int64(1), T.int64(1), T.int64(4), T.int64(4), T.int64(4)), "float32", scope="global.texture"), pool_max: T.Buffer((T.int64(1), T.int64(1), T.int64(2), T.int64(2), T.int64(4)), "float32", scope="global.texture")):
        T.func_attr({"tirx.noalias": True})
        pool_max_local = T.sblock_alloc_buffer((T.int64(1), T.int64(1), T.int64(2), T.int64(2), T.int64(4)), scope="local")
        for ax0_ax1_ax2_ax3_fused_0 in T.thread_binding(T.int64(1), thread="blockIdx.x"):
            for ax0_ax1_ax2_ax3_fused_1 in T.thread_binding(T.int64(4), thread="threadIdx.x"):
                for ax1, ax2 in T.grid(T.int64(3), T.int64(3)):
                    for ax0 in T.vectorized(T.int64(4)):
                        with T.sblock("pool_max"):
                            v0 = T.axis.spatial(T.int64(1), T.int64(0))
                            v1 = T.axis.spatial(T.int64(1), T.int64(0))
                            v2 = T.axis.spatial(T.int64(2), (ax0_ax1_ax2_ax3_fused_0 * T.int64(4) + ax0_ax1_ax2_ax3_fused_1) // T.int64(2))
                            v3 = T.axis.spatial(T.int64(2), (ax0_ax1_ax2_ax3_fused_0 * T.int64(4) + ax0_ax1_ax2_ax3_fused_1) % T.int64(2))
                            v4, r0, r1 = T.axis.remap("SRR", [ax0, ax1, ax2])
                            T.reads(x[v0, v1, v2 * T.int64(2) + r0 - T.int64(1), v3 * T.int64(2) + r1 - T.int64(1), v4])
                            T.writes(pool_max_local[v0, v1, v2, v3, v4])
                            with T.init():
                                pool_max_local[v0, v1, v2, v3, v4] = T.float32(-339999999999999996123846586046231871488.0)
                            pool_max_local[v0, v1, v2, v3, v4] = T.max(pool_max_local[v0, v1, v2, v3, v4], T.if_then_else(T.int64(1) <= v2 * T.int64(2) + r0 and v2 * T.int64(2) + r0 < T.int64(5) and T.int64(1) <= v3 * T.int64(2) + r1 and v3 * T.int64(2) + r1 < T.int64(5), x[v0, v1, v2 * T.int64(2) + r0 - T.int64(1), v3 * T.int64(2) + r1 - T.int64(1), v4], T.float32(-339999999999999996123846586046231871488.0)))
                for ax4 in T.vectorized(T.int64(4)):
                    with T.sblock("pool_max_local"):
                        v0 = T.axis.spatial(T.int64(1), T.int64(0))
                        v1 = T.axis.spatial(T.int64(1), T.int64(0))
                        v2 = T.axis.spatial(T.int64(2), (ax0_ax1_ax2_ax3_fused_0 * T.int64(4) + ax0_ax1_ax2_ax3_fused_1) // T.int64(2))
                        v3 = T.axis.spatial(T.int64(2), (ax0_ax1_ax2_ax3_fused_0 * T.int64(4) + ax0_ax1_ax2_ax3_fused_1) % T.int64(2))
                        v4 = T.axis.spatial(T.int64(4), ax4)
                        T.reads(pool_max_local[v0, v1, v2, v3, v4])
                        T.writes(pool_max[v0, v1, v2, v3, v4])
                        pool_max[v0, v1, v2, v3, v4] = pool_max_local[v0, v1, v2, v3, v4]


@I.ir_module
class TwoTextureOutputs:
    """Two outputs (a split): not one texel writer, the rule declines."""

    @T.prim_func(private=True, s_tir=True)
    def split(x: T.Buffer((T.int64(1), T.int64(2), T.int64(2), T.int64(2), T.int64(4)), "float32", scope="global.texture"), a: T.Buffer((T.int64(1), T.int64(1), T.int64(2), T.int64(2), T.int64(4)), "float32", scope="global.texture"), b: T.Buffer((T.int64(1), T.int64(1), T.int64(2), T.int64(2), T.int64(4)), "float32", scope="global.texture")):
        T.func_attr({"tirx.noalias": True})
        for i0, i1, i2, i3, i4 in T.grid(T.int64(1), T.int64(1), T.int64(2), T.int64(2), T.int64(4)):
            with T.sblock("a"):
                v0, v1, v2, v3, v4 = T.axis.remap("SSSSS", [i0, i1, i2, i3, i4])
                a[v0, v1, v2, v3, v4] = x[v0, v1, v2, v3, v4]
        for i0, i1, i2, i3, i4 in T.grid(T.int64(1), T.int64(1), T.int64(2), T.int64(2), T.int64(4)):
            with T.sblock("b"):
                v0, v1, v2, v3, v4 = T.axis.remap("SSSSS", [i0, i1, i2, i3, i4])
                b[v0, v1, v2, v3, v4] = x[v0, v1 + T.int64(1), v2, v3, v4]


@I.ir_module
class TwinCalls:
    """Two expand_dims with one signature, one with another axis, one of a constant."""

    @R.function
    def main(x: R.Tensor((4,), "float32"), y: R.Tensor((4,), "float32")):
        with R.dataflow():
            a = R.expand_dims(x, axis=[0])
            b = R.expand_dims(y, axis=[0])
            c = R.expand_dims(x, axis=[1])
            d = R.expand_dims(R.const([1.0, 2.0, 3.0, 4.0], "float32"), axis=[0])
            gv = (a, b, c, d)
            R.output(gv)
        return gv


@I.ir_module
class CenterToTexture:
    """A mean over the whole tensor feeding each texel: recomputing it per
    texel would multiply the work, the rule declines."""

    @T.prim_func(private=True, s_tir=True)
    def center(x: T.Buffer((T.int64(1), T.int64(1), T.int64(2), T.int64(2), T.int64(4)), "float32", scope="global.texture"), out: T.Buffer((T.int64(1), T.int64(1), T.int64(2), T.int64(2), T.int64(4)), "float32", scope="global.texture")):
        T.func_attr({"tirx.noalias": True})
        total = T.sblock_alloc_buffer((T.int64(1),))
        for i0, i1, i2, i3, i4 in T.grid(T.int64(1), T.int64(1), T.int64(2), T.int64(2), T.int64(4)):
            with T.sblock("total"):
                r0, r1, r2, r3, r4 = T.axis.remap("RRRRR", [i0, i1, i2, i3, i4])
                with T.init():
                    total[T.int64(0)] = T.float32(0)
                total[T.int64(0)] = total[T.int64(0)] + x[r0, r1, r2, r3, r4]
        for i0, i1, i2, i3, i4 in T.grid(T.int64(1), T.int64(1), T.int64(2), T.int64(2), T.int64(4)):
            with T.sblock("out"):
                v0, v1, v2, v3, v4 = T.axis.remap("SSSSS", [i0, i1, i2, i3, i4])
                out[v0, v1, v2, v3, v4] = x[v0, v1, v2, v3, v4] - total[T.int64(0)] * T.float32(0.0625)


@I.ir_module
class UnpackShared:
    """A conv output read by a conv (a texture) and returned (unpacked): the
    unpack reads the texture rather than a copy of it."""

    @R.function
    def main(x: R.Tensor((1, 8, 8, 8), "float32"), w1: R.Tensor((8, 8, 3, 3), "float32"),
             w2: R.Tensor((8, 8, 3, 3), "float32")):
        with R.dataflow():
            c = R.nn.conv2d(x, w1, padding=(1, 1))
            d = R.nn.conv2d(c, w2, padding=(1, 1))
            gv = (c, d)
            R.output(gv)
        return gv


@I.ir_module
class LayerNormBetweenConvs:
    """layer_norm's output feeds a conv: no schedule writes its texels."""

    @R.function
    def main(x: R.Tensor((1, 4, 4, 4), "float32"), w1: R.Tensor((4, 4, 3, 3), "float32"),
             g: R.Tensor((4,), "float32"), b: R.Tensor((4,), "float32"),
             w2: R.Tensor((4, 4, 3, 3), "float32")):
        with R.dataflow():
            c = R.nn.conv2d(x, w1, padding=(1, 1))
            n = R.nn.layer_norm(c, g, b, axes=[-1])
            gv = R.nn.conv2d(n, w2, padding=(1, 1))
            R.output(gv)
        return gv


@T.prim_func(private=True, s_tir=True)
def half_unpack(packed: T.Buffer((T.int64(1), T.int64(168), T.int64(4)), "float16"),
                flat: T.Buffer((T.int64(1), T.int64(672)), "float16")):
    # hand_landmark_lite in float16: an unpack whose read and write vectorize
    # different loops (TVM's Adreno LayoutTransform rule fails on it).
    for i0, i1 in T.grid(T.int64(1), T.int64(672)):
        with T.sblock("te_layout_transform"):
            v_i0, v_i1 = T.axis.remap("SS", [i0, i1])
            T.reads(packed[v_i0, v_i1 // T.int64(4), v_i1 % T.int64(4)])
            T.writes(flat[v_i0, v_i1])
            flat[v_i0, v_i1] = packed[v_i0, v_i1 // T.int64(4), v_i1 % T.int64(4)]


@I.ir_module
class OneByOneResidual:
    """A 1x1 conv's input added to its output: the fused kernel reads that
    input in the conv and in the epilogue."""

    @R.function
    def main(x: R.Tensor((1, 8, 16, 16), "float32"), w0: R.Tensor((8, 8, 1, 1), "float32"),
             w1: R.Tensor((8, 8, 1, 1), "float32")):
        with R.dataflow():
            h = R.nn.conv2d(x, w0)
            a = R.nn.conv2d(h, w1)
            gv = R.nn.relu(R.add(a, h))
            R.output(gv)
        return gv


@I.ir_module
class PoolOfUnevenTexels:
    """A 3x3 max pool (stride 1, padding 1) between convs on a map of 2 x 80
    x 4 texels: 640 texels on 256 threads, so the thread split is guarded
    (found by the OpenCL fuzzer)."""

    @R.function
    def main(x: R.Tensor((1, 8, 80, 4), "float32"), w1: R.Tensor((8, 8, 3, 3), "float32"),
             w2: R.Tensor((8, 8, 3, 3), "float32")):
        with R.dataflow():
            a = R.nn.conv2d(x, w1, padding=[1, 1, 1, 1])
            p = R.nn.max_pool2d(a, pool_size=[3, 3], strides=[1, 1], padding=[1, 1, 1, 1])
            y = R.nn.conv2d(p, w2, padding=[1, 1, 1, 1])
            R.output(y)
        return y


@I.ir_module
class SqueezeExcitation:
    """A gate computed by a conv of a pooled map, times the map: FuseOps
    fuses the 1 x 1 conv, its bias, its sigmoid and the product with the
    larger map into one kernel (MediaPipe's selfie segmentation)."""

    @R.function
    def main(x: R.Tensor((1, 8, 16, 16), "float32"), w: R.Tensor((8, 8, 1, 1), "float32"),
             b: R.Tensor((1, 8, 1, 1), "float32")):
        with R.dataflow():
            pooled = R.mean(x, axis=[2, 3], keepdims=True)
            gate = R.sigmoid(R.add(R.nn.conv2d(pooled, w), b))
            gv = R.multiply(x, gate)
            R.output(gv)
        return gv
