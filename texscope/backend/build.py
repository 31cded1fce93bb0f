"""Build a Relax model for a mobile GPU with texscope's texture scopes.

The Relax pipeline follows the design text: library dispatch (none by
default), texscope's texture-scope pipeline, the remaining legalization (the
Adreno conv2d legalization for NCHW4c), op patterns, constant folding, fusion,
copy folding, call-site specialization of PrimFuncs, the Adreno dlight
schedules with the generic GPU fallbacks, then the usual dataflow lowering.

TVM 0.27 registers its Adreno TIR pipeline as one pass where ``tvm.tirx.build``
wants a (pipeline, finalize_host, finalize_device) triple, and the build's
``"default"`` pipeline is the generic one: OpenCL then reads an
``image2d_array_t`` through ``vload4``.  texscope registers the Adreno passes as
a proper triple, ``texscope_adreno``, so texture-scoped buffers become
``read_imagef`` / ``write_imagef`` (with the texel stores TVM 0.27 gets wrong
retyped: :mod:`texscope.backend.lowering.tir_pipeline`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import attrs
import tvm
from tvm import relax
from tvm.tirx import compilation_pipeline

from ..cleanup import FoldTextureCopies
from ..errors import TexscopeError
from ..planner.cost import copies_in, texture_reads
from ..rewrites.lift_weights import LiftWeightTransforms, require_declared_weights
from ..tvm_workarounds.heap import collector_paused, keep_freed_memory
from .fusion import fuse_passes, run_under as _under
from .lowering.kernel_names import ShortenKernelNames
from .tuning.measured import measured_costs
from .lowering.tir_pipeline import adreno_tir_pipeline
from ..tvm_workarounds import opencl_intrinsics  # noqa: F401  (registers TVM's missing OpenCL math names)
from .parallel import build_jobs, jobs_limit, per_chunk
from .memory.device_memory import MemoryCapture, device_memory
from ..frontend.model_file import load_model
from ..frontend.naming import ConvertKeepingNames, returned_as_before, returned_names
from ..opencl.executor import plan_of
from ..opencl.source import kernel_signatures
from .outdir import record_written, start_export
from ..ir.quiet import quiet_native_stderr
from ..pipeline import annotate_module, texture_scope_pipeline
from ..diagnostics.pass_timing import PassProfile
from ..diagnostics.report import Report
from ..diagnostics.report_page import report_html
from .schedules.kernels import schedule_passes
from .memory.call_order import OrderForMemory
from .memory.storage_plan import with_planned_storages
from .lowering.specialize import (KeepStorageChangesAsKernels, SpecializeTextureParams,
                                  SplitPrimFuncsBySignature)
from ..knowledge.targets import host_target, texture_target
from .. import opencl
from ..diagnostics import verify

TIR_PIPELINE = "texscope_adreno"
# Cross-compiling the host library for a phone: the NDK's clang, e.g.
# $NDK/toolchains/llvm/prebuilt/linux-x86_64/bin/aarch64-linux-android28-clang++
NDK_CC_ENV = "TEXSCOPE_NDK_CC"


def _adreno_tir_triple():
    # The pipeline is TVM's Adreno one but for buffer compaction and the
    # texel stores' type (lowering.py).  Every pass of these lowers one
    # function alone: the parts go to threads.
    return (
        per_chunk(adreno_tir_pipeline, name="texscope.LowerKernels"),
        lambda: per_chunk(compilation_pipeline.finalize_host_passes(),
                          name="texscope.FinalizeHost"),
        lambda: per_chunk(compilation_pipeline.finalize_device_passes(),
                          name="texscope.FinalizeDevice"),
    )


compilation_pipeline.register_tir_pipeline(TIR_PIPELINE, _adreno_tir_triple)

# TVM's OpenCL code generation declares every kernel of a device module again
# in each kernel's code: quadratic in the kernels (a tuning set's 648 took
# 7.7-9.1 s here, one per module 0.1 s).  Device modules are grouped by their
# functions' target, so kernels tagged in groups of this many are generated
# as modules of their own (the tag changes no code).
KERNELS_PER_DEVICE_MODULE = 32
TIR_PIPELINE_MANY_KERNELS = "texscope_adreno_many_kernels"


@tvm.transform.module_pass(opt_level=0, name="texscope.GroupDeviceKernels")
def GroupDeviceKernels(mod: tvm.IRModule, _ctx) -> tvm.IRModule:  # pylint: disable=invalid-name
    """Each device kernel's target tagged with its group of
    :data:`KERNELS_PER_DEVICE_MODULE` (in name order)."""
    kernels = sorted((gvar for gvar, func in mod.functions.items()
                      if isinstance(func, tvm.tirx.PrimFunc) and "target" in func.attrs
                      and func.attrs["target"].kind.name == "opencl"),
                     key=lambda gvar: gvar.name_hint)
    updated = {}
    for index, gvar in enumerate(kernels):
        func = mod[gvar]
        config = dict(func.attrs["target"].export())
        config["tag"] = f"texscope-kernels-{index // KERNELS_PER_DEVICE_MODULE}"
        updated[gvar] = func.with_attr("target", tvm.target.Target(config))
    if not updated:
        return mod
    return tvm.IRModule({gvar: updated.get(gvar, func) for gvar, func in mod.functions.items()},
                        attrs=mod.attrs, global_infos=mod.global_infos)


def _many_kernels_triple():
    lower, host, device = _adreno_tir_triple()
    return tvm.transform.Sequential([lower, GroupDeviceKernels]), host, device


compilation_pipeline.register_tir_pipeline(TIR_PIPELINE_MANY_KERNELS, _many_kernels_triple)

# The passes of a build that spread their work over build_jobs() threads,
# kernel by kernel; the rest of a build runs on one thread.
THREADED_PASSES = ("texscope.ScheduleKernels", "texscope.LowerKernels",
                   "texscope.FinalizeHost", "texscope.FinalizeDevice")


def optimize_passes(target: tvm.target.Target) -> list:
    """After annotation: legalize, fuse, fold copies, specialize texture
    parameters (one PrimFunc per storage signature first), shorten long
    kernel names, schedule."""
    return [*fuse_passes(), *after_fusion_passes()]


def after_fusion_passes() -> list:
    """What :func:`optimize_passes` runs after fusion (``texscope tune``
    builds its kernel variants through the same passes)."""
    return [
        FoldTextureCopies(),
        relax.transform.DeadCodeElimination(),
        SplitPrimFuncsBySignature,
        # TVM's SpecializePrimFuncBasedOnCallSite, for texture parameters only
        # (it rejects symbolic sizes; identical output on static modules).
        SpecializeTextureParams,
        relax.transform.Normalize(),
        # After the copies above, which add a suffix to their names.
        ShortenKernelNames,
        *schedule_passes(),
    ]


def lower_passes(target: tvm.target.Target) -> list:
    return [
        # Unpacks of packed tensors come late; run them early (backend/memory_order.py).
        OrderForMemory,
        KeepStorageChangesAsKernels,
        *relax.backend.gpu_generic.dataflow_lower_passes(target),
        # TVM's planner oversizes storages of textures (backend/memory.py) and
        # shares them poorly (backend/storage_plan.py).
        *with_planned_storages(relax.backend.gpu_generic.finalize_passes(target)),
    ]


@tvm.instrument.pass_instrument
class _CaptureKernelLaunches:
    """Keeps the TIR module right after host/device splitting, where each host
    function still has its tensor parameters and launches its kernels with
    explicit thread extents: what an executor needs to run the kernels.
    Lowered in parts on several threads, the parts are joined again."""

    def __init__(self):
        self.modules = []

    def run_after_pass(self, mod, info):
        if info.name == "tirx.SplitHostDevice":
            self.modules.append(mod)

    def module(self) -> tvm.IRModule:
        functions = {g: f for mod in self.modules for g, f in mod.functions.items()}
        return tvm.IRModule(functions, attrs=self.modules[0].attrs)


def _with_instrument(instrument) -> tvm.transform.PassContext:
    current = tvm.transform.PassContext.current()
    return tvm.transform.PassContext(
        opt_level=current.opt_level, required_pass=list(current.required_pass),
        disabled_pass=list(current.disabled_pass),
        instruments=[*current.instruments, instrument], config=dict(current.config))


def get_default_pipeline(target, profile=None, lift_weights: bool = False) -> tvm.ir.transform.Pass:
    """The whole Relax pipeline, for ``tvm.compile(mod, target, relax_pipeline=...)``.

    Use it with ``tir_pipeline="texscope_adreno"``.  ``profile`` is the cost
    profile the planner weighs (the preset's defaults when None);
    ``lift_weights`` as in :func:`build`.
    """
    target = texture_target(target).target
    return _under(
        target,
        [
            tvm.tirx.transform.BindTarget(target),
            texture_scope_pipeline(target, profile=profile, lift_weights=lift_weights),
            *optimize_passes(target),
            *lower_passes(target),
        ],
        "texscope.default_pipeline",
    )


@attrs.frozen
class BuildResult:
    """What :func:`build` returns.

    Attributes
    ----------
    executable : relax.VMExecutable or None
        The Relax VM executable (None where the target cannot be compiled here).
    opencl_source : str
        The device kernels as OpenCL C ("" for other targets).
    report : Report
        Decisions per tensor, copies, counts and build figures.
    module : IRModule
        The Relax module after scheduling, before dataflow lowering.
    kernels : IRModule or None
        The TIR the executable was compiled from, right after host/device
        splitting: host functions launching device kernels (None without
        codegen).
    pass_times : tuple of texscope.diagnostics.pass_timing.PassTime
        Time per pass, the costliest first (empty unless asked for).
    """

    executable: object
    opencl_source: str
    report: Report
    module: tvm.IRModule = attrs.field(repr=False)
    kernels: tvm.IRModule | None = attrs.field(default=None, repr=False)
    pass_times: tuple = attrs.field(default=(), repr=False)

    def export(self, directory, model: str = "") -> Path:
        """Write model.so (where compiled), report.json, report.md and
        report.html (with report.svg when Graphviz is installed) into
        ``directory``, and a manifest listing them (:mod:`texscope.backend.outdir`);
        for OpenCL also the portable program that ``python -m
        texscope.opencl.replay`` runs without TVM: kernels.cl, plan.json and
        weights.npz (:mod:`texscope.opencl.plan`).  ``model`` (the model
        file's name) titles the reports."""
        out = start_export(directory)
        report = attrs.evolve(self.report, model=model) if model else self.report
        written = []
        if self.executable is not None:
            compiler = os.environ.get(NDK_CC_ENV)
            with quiet_native_stderr():
                if compiler:
                    from tvm.contrib import ndk  # imported only when cross-compiling

                    self.executable.export_library(str(out / "model.so"), fcompile=ndk.create_shared,
                                                   options=["-shared"], cc=compiler)
                else:
                    self.executable.export_library(str(out / "model.so"))
            written.append("model.so")
        if self.kernels is not None and self.opencl_source:
            written += [path.name for path in plan_of(self).write(out)]
        (out / "report.json").write_text(report.to_json())
        (out / "report.md").write_text(report.to_markdown())
        written += ["report.json", "report.md"]
        written += [p.name for p in report_html(report, out / "report.html")]
        record_written(out, written)
        return out


def device_source(executable, kind: str = "opencl") -> str:
    """The source of the executable's modules of ``kind`` (OpenCL C; LLVM IR
    for ``"llvm"``, the host code), joined."""
    sources = []

    def walk(module):
        if module.kind == kind:
            sources.append(module.inspect_source())
        for sub in module.imports:
            walk(sub)

    walk(executable.mod)
    return "\n".join(sources)


def build(mod: tvm.IRModule, target, host=None, log=None, profile=None,
          time_passes: bool = False, jobs: int | None = None,
          lift_weights: bool = False, tuning=None) -> BuildResult:
    """Build ``mod`` for a texture-capable GPU target.

    Parameters
    ----------
    mod : IRModule, str or Path
        A Relax module with static or symbolic shapes, or a model file
        (read by :func:`texscope.load_model`: TVMScript ``.py``, ``.onnx``,
        ``.tflite``, ``.pt2``).
    target : Target, tag, preset name or JSON
        e.g. ``"adreno-opencl"``, ``"qcom/adreno-opencl-texture"``, ``"mali-opencl"``.
    host : Target or str, optional
        Host target: the one ``target`` carries, else ``llvm`` at opt-level 0
        (:data:`texscope.knowledge.targets.DEFAULT_HOST`: the host code only
        checks arguments and launches kernels).  Set ``TEXSCOPE_NDK_CC`` to
        export a library for a phone.
    log : callable, optional
        Called with (stage, seconds) as each stage finishes.
    profile : CostProfile, str or Path, optional
        The cost profile the planner weighs: one ``texscope calibrate``
        measured on the device (or its file); the target preset's defaults
        when None.
    time_passes : bool
        Time every pass (:class:`texscope.diagnostics.pass_timing.PassProfile`) into
        ``BuildResult.pass_times``; the build then runs on one thread, so that
        each pass's time is its own.
    jobs : int, optional
        Threads that schedule and lower kernels (:mod:`texscope.backend.parallel`);
        by default ``$TEXSCOPE_JOBS``, else one per CPU.  The output is the
        same whatever the number.
    lift_weights : bool
        Move what the model computes from its weights alone (stage 1's
        packing of parameter weights) into ``<function>_transform_params``,
        run once when the weights are loaded (:mod:`texscope.rewrites.lift_weights`);
        the function then takes its inputs and the packed weights.  The
        model's function must declare its weights (attribute ``num_input``).
    tuning : str, Path or dict, optional
        A tuning file (``python -m texscope.opencl.tune`` measured it on the
        device for this model and target): the planner then minimises the
        measured time of kernels and copies (:mod:`texscope.planner.tuned`).

    Returns
    -------
    BuildResult
    """
    if isinstance(mod, (str, os.PathLike)):
        mod = load_model(mod)
    elif not isinstance(mod, tvm.IRModule):
        raise TexscopeError(f"texscope.build takes an IRModule or a model file's path, "
                            f"not {type(mod).__name__}")
    if lift_weights:  # before stage 1, which takes most of a build of a large model
        require_declared_weights(mod)
    keep_freed_memory()  # TVM's analyzers allocate and free MiBs per primitive
    if time_passes:
        timing = PassProfile()
        with _with_instrument(timing):
            result = build(mod, target, host, log, profile, jobs=1, lift_weights=lift_weights,
                           tuning=tuning)
        return attrs.evolve(result, pass_times=tuple(timing.passes()))
    with jobs_limit(jobs), collector_paused():
        return _build(mod, target, host, log, profile, lift_weights, tuning)


def _build(mod, target, host, log, profile, lift_weights=False, tuning=None) -> BuildResult:
    texture = texture_target(target, profile)
    device_target = tvm.target.Target(texture.target, host=host_target(host, texture.target))
    log = log or (lambda stage, seconds: None)
    figures = {"cost_profile": texture.profile.origin, "host": str(device_target.host),
               "jobs": build_jobs()}

    def timed(stage, fn, *args):
        start = time.perf_counter()
        result = fn(*args)
        figures[f"{stage}_s"] = round(time.perf_counter() - start, 3)
        log(stage, figures[f"{stage}_s"])
        return result

    measured = None
    if tuning is not None:
        measured = timed("tuning", measured_costs, mod, device_target, texture, tuning)
        figures["tuning"] = measured.origin
    with device_target:
        packed = timed("convert_layout", ConvertKeepingNames(device_target), mod)
        if lift_weights:
            packed = timed("lift_weights", LiftWeightTransforms, packed)
        annotated, plans = timed("annotate", annotate_module, packed, attrs.evolve(
            texture_target(device_target, texture.profile), tuning=measured))
        conv_reads = texture_reads(annotated)
        figures["convs"], figures["convs_reading_texture"] = conv_reads.calls, conv_reads.from_texture
        optimized = timed("optimize", _under(device_target, [
            tvm.tirx.transform.BindTarget(device_target), *optimize_passes(device_target)
        ], "texscope.optimize"), annotated)
    # Fusion binds each fused call to a fresh variable (lv41): what main
    # returns takes back the model's output names.
    optimized = returned_as_before(optimized, returned_names(packed))
    figures["copies_left"] = copies_in(optimized)
    executable, source, lowered = None, "", None
    if texture.kind == "opencl":
        executable, source, lowered = compile_opencl(optimized, device_target, figures, timed)
    elif tvm.get_global_func(f"target.build.{texture.kind}", allow_missing=True) is None:
        figures["codegen"] = (f"skipped: this TVM build has no {texture.kind} code generator "
                              f"(target.build.{texture.kind}); the annotation is complete")
    figures["build_s"] = round(sum(v for k, v in figures.items() if k.endswith("_s")), 3)
    label = target if isinstance(target, str) else str(texture.target)
    report = Report.from_plans(label, plans, figures)
    return BuildResult(executable, source, report, optimized, lowered)


def compile_opencl(optimized: tvm.IRModule, device_target: tvm.target.Target, figures: dict,
                   timed=lambda stage, fn: fn(), tir_pipeline: str = TIR_PIPELINE):
    """Lower and compile a scheduled module for OpenCL; returns the
    executable, its OpenCL source and the TIR captured after host/device
    splitting, and adds the memory and kernel counts to ``figures``.
    ``tir_pipeline``: :data:`TIR_PIPELINE_MANY_KERNELS` for a module of
    hundreds of kernels (a tuning set)."""
    capture, planned = _CaptureKernelLaunches(), MemoryCapture()
    with _with_instrument(capture), _with_instrument(planned):
        executable = timed("codegen", lambda: tvm.compile(
            optimized, target=device_target,
            relax_pipeline=_under(device_target, lower_passes(device_target), "texscope.lower"),
            tir_pipeline=tir_pipeline,
        ))
    memory = device_memory(planned.modules[-1])
    figures.update({f"memory_{k}": v for k, v in attrs.asdict(memory).items()})
    source = device_source(executable)
    kernels = kernel_signatures(source)
    figures["kernels"] = len(kernels)
    figures["kernels_with_images"] = sum("image2d" in params for params in kernels.values())
    return executable, source, capture.module()


def run_on_opencl(mod: tvm.IRModule, target, inputs=None, rtol: float = 1e-3,
                  atol: float = 1e-3, device=None, sizes=None) -> verify.Comparison:
    """Build ``mod`` with texscope, run it on an OpenCL device, compare with the CPU.

    Parameters
    ----------
    mod : IRModule
        The model as the user wrote it.
    target : Target, tag, preset name or JSON
        An OpenCL texture target, e.g. ``"adreno-opencl"``.
    inputs : list of numpy arrays, optional
        Inputs to main; random ones by default.
    rtol, atol : float
        Tolerances, as in ``numpy.allclose``, but ``atol`` a fraction of each
        output's largest magnitude, as ``texscope run --tolerance`` takes it:
        two float32 builds summing in other orders differ by a fraction of an
        output's range (1e-3 suits float32 reductions).
    device : pyopencl.Device, optional
        The first OpenCL device found by default (PoCL in CI).
    sizes : dict, optional
        For a model of symbolic size, the value of each size variable the
        random inputs take (``{"h": 224, "w": 224}``, as ``texscope run
        --size``); given inputs set their own size.
    """
    inputs = verify.random_inputs(mod, sizes=sizes) if inputs is None else inputs
    result = opencl.run(build(mod, target), inputs, device)
    return verify.compare(result.outputs, verify.reference_outputs(mod, inputs), rtol, atol,
                          of_scale=True)
