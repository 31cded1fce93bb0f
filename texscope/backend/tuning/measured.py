"""A model's kernels as fusion makes them, and the tuning file that prices them.

The plan is decided on the Relax function before fusion; the device runs
fused kernels.  :func:`fused_kernels` plans and fuses the model as
:func:`texscope.build` does and tells, per fused kernel, its key (a digest
of its PrimFunc with every parameter a global buffer: the same whatever its
operands' storages), the pre-fusion variables at its operand positions and
the calls it contains (read from FuseOps' grouped functions, whose
bindings keep the pre-fusion names).  :func:`measured_costs` checks that a
tuning file belongs to the model and target and hands the planner both.
"""

from __future__ import annotations

import functools
import json

import tvm
import tvm_ffi
from tvm import relax

from ...errors import TexscopeError
from ...frontend.naming import ConvertKeepingNames
from ...ir.graph import CALL_TIR, static_shape
from ...knowledge import profile as cost_profile
from ...knowledge.targets import TEXTURE_KINDS, preset_of, texture_target
from ...opencl import tuning as tuning_file
from ...pipeline import annotate_module
from ...planner.tuned import KernelUse, MeasuredCosts
from ..fusion import fuse_passes, run_under
from ..schedules.scope_variants import plain

EVERYWHERE = cost_profile.EVERYWHERE
# A build fitted to a device's images (texscope run, build --fit-device) plans
# under smaller texture limits than the preset its tuning set was built for;
# a kernel's code for given storages does not depend on them.
_TEXTURE_LIMITS = ("texture_spatial_limit", "texture_depth_limit")


def model_fingerprint(mod: tvm.IRModule) -> str:
    """A short digest of the model as given (before texscope touches it)."""
    return f"{tvm_ffi.structural_hash(mod) & (2**64 - 1):016x}"


def kernel_key(func: tvm.tirx.PrimFunc) -> str:
    """A kernel's name whatever its operands' storages and the texture
    limits its target was fitted to: a digest of the PrimFunc with every
    parameter a global buffer and its target's limits the preset's."""
    target = func.attrs.get("target") if func.attrs is not None else None
    if target is not None:
        func = func.with_attr("target", _with_preset_limits(target))
    return f"{tvm_ffi.structural_hash(plain(func)) & (2**64 - 1):016x}"


@functools.lru_cache(maxsize=None)
def _preset_limited(described: str) -> tvm.target.Target:
    exported = json.loads(described)
    preset = preset_of(tvm.target.Target(exported))
    exported.update(zip(_TEXTURE_LIMITS, (preset.spatial_limit, preset.depth_limit)))
    return tvm.target.Target(exported)


def _with_preset_limits(target: tvm.target.Target) -> tvm.target.Target:
    """``target`` with the texture limits of its device's preset (a build
    fitted to a device's smaller images binds the same kernels to a target of
    other limits: BindTarget puts it into every PrimFunc)."""
    if target.kind.name not in TEXTURE_KINDS \
            or any(limit not in target.attrs for limit in _TEXTURE_LIMITS):
        return target
    preset = preset_of(target)
    if tuple(int(target.attrs[limit]) for limit in _TEXTURE_LIMITS) \
            == (preset.spatial_limit, preset.depth_limit):
        return target  # the preset's own: its keys as they always were
    return _preset_limited(str(target))


def target_label(target) -> str:
    """A target as tuning files name it (its full description, host left out)."""
    return str(texture_target(target).target)


def kernels_target(target) -> str:
    """What a target's kernels are built for: its description with its
    preset's texture limits, which only say which tensors may be images."""
    return str(_with_preset_limits(texture_target(target).target))


def plan_profiles(texture):
    """The profiles whose plans ``texscope tune`` covers: the target's,
    every eligible tensor in a texture, none, and every eligible map in a
    texture with the weights in buffers (a kernel of many operands gets the
    combinations of these plans, not every one: docs/tuning.md)."""
    maps = texture.profile.with_gains(EVERYWHERE, EVERYWHERE, "every eligible map a texture, "
                                      "the weights in buffers", weight_read=-EVERYWHERE)
    return {"profile": texture.profile, **cost_profile.extreme_profiles(texture.profile),
            "maps-in-textures": maps}


def _bindings(func: relax.Function):
    return [b for block in func.body.blocks for b in block.bindings]


def _var_name(expr) -> str | None:
    return expr.name if isinstance(expr, relax.Var) else None


def fused_kernels(mod: tvm.IRModule, device_target, profile):
    """``mod`` planned with ``profile`` and fused as the build does; returns
    the fused module and, per function, its kernels (:class:`KernelUse`) and
    the names (``#k``) its group outputs got (see :func:`_group`)."""
    with device_target:
        packed = ConvertKeepingNames(device_target)(mod)
        annotated, _ = annotate_module(packed, texture_target(device_target, profile))
        passes = [tvm.tirx.transform.BindTarget(device_target), *fuse_passes()]
        split = next(i for i, p in enumerate(passes) if p.info.name == "FuseTIR")
        grouped = run_under(device_target, passes[:split], "texscope.tune.group")(annotated)
        fused = run_under(device_target, passes[split:], "texscope.tune.fuse")(grouped)
    uses, aliases = {}, {}
    for gvar, func in fused.functions.items():
        if not isinstance(func, relax.Function) or \
                gvar.name_hint not in {g.name_hint for g in grouped.get_global_vars()}:
            continue
        # Relax names need not be unique (FuseOps names a group's variable
        # after its first call's): bindings are matched by their variables.
        before = {b.var.__chandle__(): b.value for b in _bindings(grouped[gvar.name_hint])}
        found, renamed = [], {}
        aliases[gvar.name_hint] = {}
        for binding in _bindings(func):
            call = binding.value
            if not (isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op)
                    and call.op.name == CALL_TIR):
                continue
            # "?": a constant (a folded weight), found by the planner in the
            # group's calls, in the order they read them.
            inputs = tuple(renamed.get(arg.__chandle__(), arg.name)
                           if isinstance(arg, relax.Var) else "?"
                           for arg in call.args[1].fields if isinstance(arg.ty, relax.TensorType))
            members = outputs = (binding.var.name,)
            grouping = before.get(binding.var.__chandle__())
            if isinstance(grouping, relax.Call) and isinstance(grouping.op, relax.GlobalVar) \
                    and isinstance(grouped[grouping.op], relax.Function):
                members, outputs = _group(grouped[grouping.op], grouping, renamed)
                # A short name for what the next kernels read (a description
                # naming descriptions would grow with the model's depth).
                token = f"#{len(aliases[gvar.name_hint])}"
                aliases[gvar.name_hint][token] = outputs[0]
                renamed[binding.var.__chandle__()] = token
            elif isinstance(binding.var.ty, relax.TupleType):
                outputs = tuple(f"{outputs[0]}[{i}]" for i in range(len(binding.var.ty.fields)))
            found.append(KernelUse(kernel_key(fused[call.args[0]]), call.args[0].name_hint,
                                   inputs, outputs, members))
        uses[gvar.name_hint] = tuple(found)
    return fused, uses, aliases


def _shape_of(call: relax.Call) -> str:
    """``"1x8x16x16x4"``: a call's (first) output shape, "" where not static."""
    ty = call.ty.fields[0] if isinstance(call.ty, relax.TupleType) and call.ty.fields else call.ty
    shape = static_shape(ty) if isinstance(ty, relax.TensorType) else None
    return "x".join(map(str, shape)) if shape is not None else ""


def _callee(call: relax.Call) -> str:
    """What a call runs: its PrimFunc's name, or its operator's last name."""
    if isinstance(call.op, tvm.ir.Op) and call.op.name == CALL_TIR:
        return call.args[0].name_hint
    return call.op.name.rsplit(".", 1)[-1] if isinstance(call.op, tvm.ir.Op) else "?"


def _group(inner: relax.Function, call: relax.Call, renamed: dict):
    """The calls a FuseOps group holds and its outputs, named for the
    planner's pre-fusion graph.  Inside a group FuseOps keeps names of the
    first group of the same form, so a group's output is named by how it is
    computed from the group's operands (:class:`texscope.planner.tuned.Names`'
    form: ``"=1x4:add(a, =1x8:conv2d(b))"``, the call of ``add`` of output
    shape 1x4 reading ``a`` and the output of the call reading ``b``)."""
    names = {param.__chandle__(): renamed.get(arg.__chandle__(), _var_name(arg))
             for param, arg in zip(inner.params, call.args) if isinstance(arg, relax.Var)}
    bindings = _bindings(inner)
    values = {b.var.__chandle__(): b.value for b in bindings}

    def describe(expr) -> str:
        if expr.__chandle__() in names:
            return names[expr.__chandle__()]
        value = values.get(expr.__chandle__())
        if isinstance(value, relax.TupleGetItem):
            return f"{describe(value.tuple_value)}[{value.index}]"
        if isinstance(value, relax.Call):
            args = value.args[1].fields if isinstance(value.op, tvm.ir.Op) and \
                value.op.name == CALL_TIR else value.args
            return f"={_shape_of(value)}:{_callee(value)}(" + ", ".join(
                describe(a) if isinstance(a, relax.Var) else "?"
                for a in args if isinstance(a.ty, relax.TensorType)) + ")"
        if isinstance(value, relax.Var):
            return describe(value)
        return "?"

    result = inner.body.body
    fields = result.fields if isinstance(result, relax.Tuple) else [result]
    outputs = tuple(describe(field) for field in fields)
    return tuple(describe(b.var) for b in bindings), outputs


def check_belongs(mod: tvm.IRModule, texture, document, origin: str) -> None:
    """Refuse a tuning ``document`` measured for another model or target."""
    fingerprint = model_fingerprint(mod)
    if document["model_fingerprint"] != fingerprint:
        raise TexscopeError(f"{origin} was measured for another model ({document['model']}, "
                            f"fingerprint {document['model_fingerprint']}; this one is "
                            f"{fingerprint}): tune this model with `texscope tune`")
    if kernels_target(document["target"]) != kernels_target(texture.target):
        raise TexscopeError(f"{origin} was measured for target {document['target']!r}, not "
                            f"this build's ({target_label(texture.target)})")


def measured_costs(mod: tvm.IRModule, device_target, texture, tuning) -> MeasuredCosts:
    """The tuning file ``tuning`` (a path or parsed document) for ``mod``
    built for ``texture``'s target, with the build's kernels; refused when
    measured for another model, target or device."""
    if isinstance(tuning, dict):
        origin = tuning.get("origin", "the tuning given")
        document = tuning_file.check_tuning(tuning, origin)
    else:
        origin, document = str(tuning), tuning_file.load(tuning)
    check_belongs(mod, texture, document, origin)
    device = texture.profile.device.get("name")
    measured_on = document["device"]["name"]
    if not texture.profile.origin.startswith("built-in") and device and device != measured_on:
        raise TexscopeError(f"{origin} was measured on {measured_on!r}, the cost profile "
                            f"on {device!r}: tune and calibrate on the same device")
    _, uses, aliases = fused_kernels(mod, device_target, plan_profiles(texture)["all-buffer"])
    return MeasuredCosts(document, uses, aliases, origin)
