"""Stage 1: packed 5-D layouts, then legalization that keeps operator attributes.

Operators TVM cannot build for a GPU are rewritten into ones it can
(:mod:`texscope.rewrites.decompose`: ``ewise_fma``, ``conv2d_transpose`` as a conv);
clips become a maximum and a minimum, which follow packed layouts
(:mod:`texscope.rewrites.clip_bounds`), and a global average pool over a
large map a pool of its rows then one of their means
(:mod:`texscope.rewrites.global_pool`);
convs whose channel counts are not multiples of 4 get zero channels
(:mod:`texscope.rewrites.pad_channels`), and the operands of broadcasting binary
operators equal ranks (:mod:`texscope.rewrites.broadcast_rank`); ConvertLayout then packs activations as NCHW4c
and conv2d weights as OIHW4o (the layouts come from the registry); pools
follow their input; a channel pad of whole texels between an unpack and a
pack is done on the packed tensor (:mod:`texscope.rewrites.texel_pad`).  TVM's ConvertLayout's result is computed by
:mod:`texscope.rewrites.packed_layout` from the registry's layout rules, TVM's
pass running only where those do not cover the module.  Operators the
registry keeps stay Relax calls.  Operators whose decisions need their
attributes are legalized with the operator and those attributes recorded on
the PrimFunc as a printable ``texscope_op`` dict (Relax type inference of those
operators ignores a VDevice in ``ty_args``, so they cannot stay calls).  Every
PrimFunc then gets an ``op_pattern``.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import relax

from .knowledge import registry
from .rewrites.broadcast_rank import ExpandBroadcastRank
from .rewrites.clip_bounds import ClipAsMaxMin
from .rewrites.global_pool import SplitGlobalPools
from .rewrites.decompose import DecomposeForGPU
from .errors import TexscopeError
from .rewrites.fold_constants import fold_constants
from .ir.graph import CALL_TIR, redirect_calls, relax_bindings, require_shapes
from .rewrites.legalize import legalization_of, legalize_map, once_per_signature
from .rewrites.pad_channels import PadChannels
from .rewrites.packed_layout import ConvertLayoutByRules
from .rewrites.texel_pad import PadWholeTexels
from .knowledge.targets import texture_target


def _recording(op_name: str, fields: list[str]):
    # Below the recording: what is cached is the PrimFunc as legalized, which
    # is what each call's legalization would add before its attributes go on.
    default = once_per_signature(legalization_of(op_name),
                                 signature_attrs=(registry.OP_RECORD_ATTR,))
    # Kernels this table recorded, by name: a repeated call of variables gets
    # the kernel its first call recorded, and reading the record back from
    # the builder costs more than legalizing the call (a 64-conv chain: 6 ms).
    written: dict[str, tuple] = {}

    def legalize(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
        lowered = default(bb, call)
        if isinstance(lowered, relax.Call) and isinstance(lowered.op, tvm.ir.Op) \
                and lowered.op.name == CALL_TIR:
            gvar = lowered.args[0]
            values = tuple(str(getattr(call.attrs, f)) for f in fields)
            if written.get(gvar.name_hint) == values:
                return lowered
            record = {"op": op_name, **dict(zip(fields, values))}
            written[gvar.name_hint] = values
            func = bb.get()[gvar]
            # A call of variables reuses a kernel recorded already: writing the
            # same record again would rehash the kernel for nothing.
            recorded = func.attrs.get(registry.OP_RECORD_ATTR) if func.attrs else None
            if recorded is None or not tvm_ffi.structural_equal(recorded, record):
                bb.update_func(gvar, func.with_attr(registry.OP_RECORD_ATTR, record))
        return lowered

    return legalize


def merge_identical_prim_funcs(mod: tvm.IRModule, before: tvm.IRModule | None = None
                               ) -> tvm.IRModule:
    """One PrimFunc per distinct body, calls redirected to it.

    Recording attributes updates each legalized PrimFunc after the
    BlockBuilder deduplicated it, so identical kernels (say, a layout
    transform per batch-norm parameter) would otherwise all be built.
    Only PrimFuncs added since ``before`` (all, without it) are compared:
    the duplicates come from one legalization.  Of twins, the one the
    builder named first is kept.
    """
    canonical: dict[relax.GlobalVar, relax.GlobalVar] = {}
    seen: dict[int, list[relax.GlobalVar]] = {}
    old = set() if before is None else {g.name_hint for g in before.functions}
    for gvar in sorted(mod.functions, key=lambda g: _creation_order(g.name_hint)):
        func = mod[gvar]
        if not isinstance(func, tvm.tirx.PrimFunc) or gvar.name_hint in old:
            continue
        bucket = seen.setdefault(tvm_ffi.structural_hash(func), [])
        twin = next((g for g in bucket if tvm_ffi.structural_equal(mod[g], func)), None)
        if twin is None:
            bucket.append(gvar)
        else:
            canonical[gvar] = twin
    if not canonical:
        return mod
    functions = {g: f for g, f in mod.functions.items() if g not in canonical}
    for gvar, func in functions.items():
        if isinstance(func, relax.Function):
            functions[gvar] = redirect_calls(func, canonical)
    return tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos)


def _creation_order(name: str) -> tuple:
    """A key ordering the names a BlockBuilder gives one hint (``add``,
    ``add1``, ... ``add9``, ``add10``) as it gave them."""
    digits = len(name) - len(name.rstrip("0123456789"))
    return name[:len(name) - digits], digits, name


def _all_constant(expr) -> bool:
    """No variable among the (possibly nested tuple) argument ``expr``."""
    if isinstance(expr, relax.Tuple):
        return all(_all_constant(field) for field in expr.fields[:])
    return not isinstance(expr, relax.Var)


def _foldable(mod: tvm.IRModule) -> bool:
    """Whether some operator call has only constant arguments.

    Folding walks the whole module, a waste when weights are parameters.
    """
    return any(
        isinstance(binding.value, relax.Call) and isinstance(binding.value.op, tvm.ir.Op)
        and all(_all_constant(arg) for arg in binding.value.args[:])
        for _, binding in relax_bindings(mod)
    )


@tvm.transform.module_pass(opt_level=0, name="texscope.FoldConstantsIfAny")
def FoldConstantsIfAny(mod: tvm.IRModule, _ctx) -> tvm.IRModule:  # pylint: disable=invalid-name
    """Relax's FoldConstant (computed by :func:`texscope.rewrites.fold_constants.fold_constants`),
    skipped when no call has only constant arguments."""
    return fold_constants(mod) if _foldable(mod) else mod


def LegalizeKeepingAttrs() -> tvm.ir.transform.Pass:  # pylint: disable=invalid-name
    """LegalizeOps for all but the kept operators, recording attributes where
    the registry decides by them, then AnnotateTIROpPattern."""

    @tvm.transform.module_pass(opt_level=0, name="texscope.LegalizeKeepingAttrs")
    def legalize(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        recording = {op: _recording(op, f) for op, f in registry.recorded_attrs().items()}
        kept = registry.kept_ops()
        table = legalize_map(mod, recording, kept)
        if table:  # else every operator left is kept (the pipeline's second pass)
            legalized = relax.transform.LegalizeOps(table, skip_ops=kept)(mod)
            merged = merge_identical_prim_funcs(legalized, before=mod)
            mod = legalized if merged is legalized else relax.transform.Normalize()(merged)
        return relax.transform.AnnotateTIROpPattern()(mod)

    return legalize


def ConvertToPackedLayout(target) -> tvm.ir.transform.Pass:  # pylint: disable=invalid-name
    """Stage 1 as one pass.

    Parameters
    ----------
    target : tvm.target.Target or str
        A texture-capable GPU target; legalization runs under it.

    Returns
    -------
    tvm.ir.transform.Pass
    """
    texture = texture_target(target)

    @tvm.transform.module_pass(opt_level=0, name="texscope.ConvertToPackedLayout")
    def convert(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        require_shapes(mod)
        with texture.target:
            mod = tvm.transform.Sequential([
                relax.transform.DecomposeOpsForInference(),
                DecomposeForGPU(),
                ClipAsMaxMin(),
                SplitGlobalPools(),
                PadChannels(),
                ExpandBroadcastRank(),
            ])(mod)
            try:
                mod = ConvertLayoutByRules(registry.desired_layouts)(mod)
            except tvm.error.InternalError as err:
                # Only TVM's message crosses its pass infrastructure (a chained
                # cause does not): keep all of it and its type.  Only
                # ConvertLayout is wrapped: an error elsewhere is no layout's.
                raise TexscopeError(
                    "packing layouts failed inside TVM's ConvertLayout; an operator whose "
                    "layout cannot follow NCHW4c needs a registry entry with its "
                    f"layout_attrs ({type(err).__name__}: {err})"
                ) from err
            return tvm.transform.Sequential([
                relax.transform.Normalize(),
                PadWholeTexels(),
                FoldConstantsIfAny,
                LegalizeKeepingAttrs(),
            ])(mod)

    return convert
