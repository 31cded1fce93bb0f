"""TVM's own Adreno texture passes, arranged for side-by-side comparison.

These reproduce the texture part of ``relax.backend.adreno.legalize_passes``
so texscope can be run on the same input as upstream and measured after the
same passes.
"""

from __future__ import annotations

import tvm
from tvm import relax

from .build import fuse_passes

UPSTREAM_SKIP_OPS = ["relax.nn.conv2d", "relax.nn.max_pool2d", "relax.nn.adaptive_avg_pool2d"]


def stage1() -> tvm.transform.Sequential:
    """Upstream's passes before AnnotateCustomMemoryScope (run under the target)."""
    return tvm.transform.Sequential([
        relax.transform.DecomposeOpsForInference(),
        relax.transform.ConvertLayout({"relax.nn.conv2d": ["NCHW4c", "OIHW4o", "NCHW4c"]}),
        relax.transform.Normalize(),
        relax.transform.FoldConstant(),
        relax.transform.LegalizeOps(skip_ops=UPSTREAM_SKIP_OPS),
        relax.transform.AnnotateTIROpPattern(),
    ])


def annotate(target: tvm.target.Target) -> tvm.ir.transform.Pass:
    """Upstream's C++ scope annotation."""
    return relax.backend.adreno.transform.AnnotateCustomMemoryScope(target)


def after_annotation() -> tvm.transform.Sequential:
    """Upstream's passes after annotation, up to and with copy folding.

    The packed conv legalization is texscope's (TVM's divides by zero on
    depthwise convs); it does not touch memory scopes.
    """
    return tvm.transform.Sequential([
        *fuse_passes(),
        relax.backend.adreno.transform.FoldVDeviceScopeChange(),
        relax.transform.DeadCodeElimination(),
    ])
