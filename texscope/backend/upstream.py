"""TVM's own Adreno texture passes, arranged for side-by-side comparison.

These reproduce the texture part of ``relax.backend.adreno.legalize_passes``
so texscope can be run on the same input as upstream and measured after the
same passes.
"""

from __future__ import annotations

import tvm
from tvm import relax

from .build import TIR_PIPELINE, device_source, fuse_passes

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


def adreno_build(mod: tvm.IRModule, target: tvm.target.Target):
    """TVM's own whole Adreno build of ``mod`` (with texscope's TIR pipeline,
    so its image kernels are valid OpenCL): ``(opencl_source, module)``, the
    module as it was before dataflow lowering, for counting copies.

    ``mod`` is left as it was: TVM 0.27's Adreno passes rewrite a module with
    constant weights in place (found building a zoo network with its weights
    bound: texscope's build of the same module then failed), so they get a copy.
    """
    mod = tvm.ir.load_json(tvm.ir.save_json(mod))
    captured = {}

    @tvm.transform.module_pass(opt_level=0)
    def capture(m, _ctx):
        captured["mod"] = m
        return m

    @tvm.transform.module_pass(opt_level=0)
    def pipeline(m, _ctx):
        with target:  # upstream's legalize_passes reads Target.current() when built
            passes = (relax.backend.adreno.library_dispatch_passes(target)
                      + relax.backend.adreno.legalize_passes(target) + [capture]
                      + relax.backend.adreno.dataflow_lower_passes(target)
                      + relax.backend.adreno.finalize_passes(target))
            return tvm.transform.Sequential(passes)(m)

    executable = tvm.compile(mod, target=target, relax_pipeline=pipeline,
                             tir_pipeline=TIR_PIPELINE)
    return device_source(executable), captured["mod"]
