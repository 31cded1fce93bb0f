"""Stages 2-5 as one pass, and the whole texture-scope pipeline."""

from __future__ import annotations

import tvm
from tvm import relax

from .cleanup import Cleanup
from .collect_consumer import collect_consumer
from .collect_producer import ProducerInfo, collect_producer
from .define_vdevice import define_vdevice
from .errors import TexscopeError
from .ir.graph import annotated_functions, relax_bindings
from .knowledge.targets import TextureTarget, texture_target
from .diagnostics.verify import check_invariants
from .convert_layout import ConvertToPackedLayout, LegalizeKeepingAttrs
from .rewrites.lift_weights import LiftWeightTransforms

ANNOTATED_ATTR = "texscope_target"


def plan_module(mod: tvm.IRModule, texture: TextureTarget,
                policy: str = "optimal") -> dict[str, ProducerInfo]:
    """Run stages 2 and 3 on every annotated function."""
    # Calls between Relax functions are inlined or refused before this runs
    # (annotate_module), so every parameter is its function's caller's to place.
    return {
        gvar.name_hint: collect_producer(collect_consumer(mod, gvar, texture), policy)
        for gvar in annotated_functions(mod)
    }


def _check_no_calls_between_functions(mod: tvm.IRModule) -> None:
    for gvar, binding in relax_bindings(mod, annotated_functions(mod)):
        value = binding.value
        if isinstance(value, relax.Call) and isinstance(value.op, relax.GlobalVar) \
                and isinstance(mod[value.op], relax.Function):
            raise TexscopeError(
                f"calls the public Relax function {value.op.name_hint!r}; texscope "
                "annotates calls into private functions by inlining them: make it private",
                gvar.name_hint,
                binding.var.name,
            )


def _check_not_annotated(mod: tvm.IRModule) -> None:
    for gvar, binding in relax_bindings(mod, annotated_functions(mod)):
        ty = binding.var.ty
        if isinstance(ty, relax.TensorType) and ty.vdevice is not None:
            raise TexscopeError(
                "the module already carries VDevice annotations (from another "
                "pass?); give texscope the module before annotation",
                gvar.name_hint,
                binding.var.name,
            )


def _checked(mod: tvm.IRModule, stage: str, texture: TextureTarget, invariants: bool):
    try:
        relax.analysis.well_formed(mod)
    except Exception as err:  # TVM reports ill-formed IR with several error types
        raise TexscopeError(f"texscope produced ill-formed IR after {stage}: {err}") from None
    if invariants:
        violations = check_invariants(mod, texture.target)
        if violations:
            first = violations[0]
            raise TexscopeError(
                f"{len(violations)} invariant(s) broken after {stage}: "
                + "; ".join(map(str, violations)),
                first.function,
                first.binding,
            )
    return mod


def AnnotateTextureScope(target, check: bool = False, policy: str = "optimal",  # pylint: disable=invalid-name
                         profile=None) -> tvm.ir.transform.Pass:
    """Stages 2-5: choose and realize a memory scope for every tensor.

    A drop-in replacement for
    ``relax.backend.adreno.transform.AnnotateCustomMemoryScope(target)``.
    Running it on a module it already annotated returns that module.

    Parameters
    ----------
    target : tvm.target.Target or str
        A texture-capable GPU target.
    check : bool
        Check well-formedness after every internal stage and
        :func:`texscope.diagnostics.verify.check_invariants` at the end; a failure is a
        TexscopeError.  Off by default, on in the tests.
    policy : str
        How stage 3 decides: ``"optimal"`` (the whole graph, exactly, by
        min-cut) or ``"local"`` (each tensor alone).
    profile : CostProfile, str or Path, optional
        The prices the optimal policy weighs: a profile ``texscope calibrate``
        measured on the device (or its file), else the target preset's
        defaults (see :mod:`texscope.knowledge.profile`).

    Returns
    -------
    tvm.ir.transform.Pass
    """
    texture = texture_target(target, profile)

    @tvm.transform.module_pass(opt_level=0, name="texscope.AnnotateTextureScope")
    def annotate(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return annotate_module(mod, texture, check, policy)[0]

    return annotate


def annotate_module(
    mod: tvm.IRModule, texture: TextureTarget, check: bool = False, policy: str = "optimal"
) -> tuple[tvm.IRModule, dict[str, ProducerInfo]]:
    """Stages 2-5 on a module; returns it annotated and the plans behind it.

    The plans are empty when the module was annotated by texscope already.
    """
    if mod.attrs is not None and ANNOTATED_ATTR in mod.attrs:
        return mod, {}
    if not annotated_functions(mod):
        raise TexscopeError("the module has no Relax function to annotate")
    _check_not_annotated(mod)
    # A call's type comes from its callee's GlobalVar, which cannot be retyped
    # without changing the caller's module: private callees are inlined.
    mod = relax.transform.InlinePrivateFunctions()(mod)
    _check_no_calls_between_functions(mod)
    # Input from upstream's stage 1 still has Relax pools; their type
    # inference would ignore the VDevice in ty_args.
    with texture.target:
        mod = LegalizeKeepingAttrs()(mod)
    if check:
        _checked(mod, "legalization", texture, invariants=False)
    plans = plan_module(mod, texture, policy)

    @tvm.transform.module_pass(opt_level=0, name="texscope.DefineVDevice")
    def define(module: tvm.IRModule, _ctx) -> tvm.IRModule:
        return define_vdevice(module, plans, texture)

    mod = define(mod)
    if check:
        _checked(mod, "define_vdevice", texture, invariants=False)
    mod = Cleanup()(mod).with_attr(ANNOTATED_ATTR, str(texture.target.kind.name))
    if check:
        _checked(mod, "cleanup", texture, invariants=True)
    return mod, plans


def texture_scope_pipeline(target, check: bool = False, policy: str = "optimal",
                           profile=None, lift_weights: bool = False) -> tvm.transform.Sequential:
    """Stage 1 then stages 2-5, for a build script to splice in.

    ``check``, ``policy`` and ``profile`` (the cost profile) are passed to
    :func:`AnnotateTextureScope`; ``lift_weights`` moves stage 1's packing of
    weight parameters into ``<function>_transform_params`` in between
    (:mod:`texscope.rewrites.lift_weights`).
    """
    return tvm.transform.Sequential(
        [ConvertToPackedLayout(target),
         *([LiftWeightTransforms] if lift_weights else []),
         AnnotateTextureScope(target, check=check, policy=policy, profile=profile)],
        name="texscope.texture_scope_pipeline",
    )
