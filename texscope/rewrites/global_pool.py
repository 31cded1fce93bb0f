"""A global average pool over a large map as a pool of rows, then of columns.

A pool writes whole texels with one thread per output texel, summing its
window on that thread (texscope's ``TexelWriter`` schedule).  A global pool
has one output texel per four channels: MediaPipe's selfie segmentation
averages a 128 x 128 map of 16 channels on 4 threads, 16384 texels each,
and its ten global pools took 2.4 of its 5.3 ms on an H200 (NVIDIA's
OpenCL), 0.13 ms even for 16 x 16 maps.  The mean of the rows' means is the
map's mean (every row holds as many pixels), and each of those pools has a
thread per row (then per channel block) summing one row (then one column).

Rewritten: ``avg_pool2d`` whose window is its whole (unpadded, undilated)
input, and ``adaptive_avg_pool2d`` to 1 x 1, in NCHW or NHWC, where the map
has at least :data:`SPLIT_FROM` pixels and more than one row and column.
"""

from __future__ import annotations

import tvm
from tvm import relax

from ..ir.graph import static_shape
from ..ir.rebuild import rewrite_bindings

_AVG_POOL = tvm.ir.Op.get("relax.nn.avg_pool2d")
_ADAPTIVE_AVG_POOL = tvm.ir.Op.get("relax.nn.adaptive_avg_pool2d")
# The smallest map split: 16 x 16 (0.13 ms as one pool on the H200); the
# 7 x 7 heads of classifiers stay one pool.
SPLIT_FROM = 256


def _map_size(call: relax.Call) -> tuple[int, int] | None:
    """(height, width) of the map ``call`` averages whole, else None."""
    layout = str(call.attrs.layout)
    shape = static_shape(call.args[0].ty)
    if layout not in ("NCHW", "NHWC") or shape is None \
            or str(call.attrs.out_layout or layout) != layout:
        return None
    size = (shape[layout.index("H")], shape[layout.index("W")])
    if call.op.same_as(_ADAPTIVE_AVG_POOL):
        whole = [int(d) for d in call.attrs.output_size] == [1, 1]
    else:
        whole = ([int(d) for d in call.attrs.pool_size] == list(size)
                 and all(int(p) == 0 for p in call.attrs.padding)
                 and all(int(d) == 1 for d in call.attrs.dilation))
    return size if whole else None


def _split(call: relax.Expr, _values) -> relax.Expr | None:
    if not (isinstance(call, relax.Call)
            and (call.op.same_as(_AVG_POOL) or call.op.same_as(_ADAPTIVE_AVG_POOL))):
        return None
    size = _map_size(call)
    if size is None or min(size) < 2 or size[0] * size[1] < SPLIT_FROM:
        return None
    height, width = size
    layout = str(call.attrs.layout)
    rows = relax.op.nn.avg_pool2d(call.args[0], pool_size=(1, width), strides=(1, width),
                                  layout=layout)
    return relax.op.nn.avg_pool2d(rows, pool_size=(height, 1), strides=(height, 1),
                                  layout=layout)


def SplitGlobalPools() -> tvm.ir.transform.Pass:  # pylint: disable=invalid-name
    """Rewrite a global average pool over a large map as two pools (see the
    module docstring); any other call is left as it is."""

    @tvm.transform.module_pass(opt_level=0, name="texscope.SplitGlobalPools")
    def split_global_pools(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return rewrite_bindings(mod, _split)

    return split_global_pools
