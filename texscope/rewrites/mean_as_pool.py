"""A mean over an image's two spatial axes as a global average pool.

MediaPipe's models average a feature map over its rows and columns (the
squeeze of a squeeze and excitation block) either with ``AVERAGE_POOL_2D``
or with ``MEAN`` over axes 1 and 2 (selfie_segmentation and its landscape
variant, one each).  TVM's frontend makes the first a pool and the second a
``relax.mean``, which only TVM's generic reduction schedules take: buffers
in and out, so the 1 x 1 conv after it read a buffer (11 of the landscape
model's 55 convs).  ``adaptive_avg_pool2d`` to 1 x 1 computes the same sum
over the same window divided by its size, follows packed layouts and writes
whole texels (the registry's pool entry).  Only a 4-D mean keeping its
dimensions, over axes 1 and 2 (NHWC) or 2 and 3 (NCHW), is rewritten.
"""

from __future__ import annotations

import tvm
from tvm import relax

from ..ir.rebuild import rewrite_bindings

_MEAN = tvm.ir.Op.get("relax.mean")
_LAYOUT_OF_AXES = {(1, 2): "NHWC", (2, 3): "NCHW"}


def _pool_layout(call: relax.Call) -> str | None:
    """The layout in which ``call``, a mean, is a global 2-D average pool."""
    ndim = getattr(call.args[0].ty, "ndim", -1)
    if ndim != 4 or not bool(call.attrs.keepdims) or call.attrs.axis is None:
        return None
    axes = tuple(sorted(int(axis) % ndim for axis in call.attrs.axis))
    return _LAYOUT_OF_AXES.get(axes)


def MeanAsPool() -> tvm.ir.transform.Pass:  # pylint: disable=invalid-name
    """Rewrite a spatial ``mean`` as ``adaptive_avg_pool2d`` to 1 x 1 (see
    the module docstring); any other call is left as it is."""

    def rewrite(call: relax.Expr, _values) -> relax.Expr | None:
        if not (isinstance(call, relax.Call) and call.op.same_as(_MEAN)):
            return None
        layout = _pool_layout(call)
        if layout is None:
            return None
        return relax.op.nn.adaptive_avg_pool2d(call.args[0], output_size=(1, 1), layout=layout)

    @tvm.transform.module_pass(opt_level=0, name="texscope.MeanAsPool")
    def mean_as_pool(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return rewrite_bindings(mod, rewrite)

    return mean_as_pool
