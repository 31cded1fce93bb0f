"""Fusion as the build does it, and running passes under a target.

Shared by :mod:`texscope.backend.build` and ``texscope tune``
(:mod:`texscope.backend.tuning.measured`), which fuses the model as the build does
to know its kernels.
"""

from __future__ import annotations

import tvm
from tvm import relax

from ..rewrites.legalize import LegalizeOnce, packed_legalizations


def fuse_passes() -> list:
    """After annotation: the remaining legalization, then fusion (as upstream)."""
    return [
        # The default legalization leaves packed convs to texscope's (any groups).
        LegalizeOnce(),
        LegalizeOnce(packed_legalizations()),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
        relax.transform.DeadCodeElimination(),
    ]


def run_under(target: tvm.target.Target, passes: list, name: str) -> tvm.ir.transform.Pass:
    @tvm.transform.module_pass(opt_level=0, name=name)
    def run(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        with target:
            return tvm.transform.Sequential(passes)(mod)

    return run
