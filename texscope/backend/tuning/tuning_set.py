"""Build a model's tuning set: its kernels in every storage the planner could give them.

``texscope tune MODEL --target T -o DIR`` (TVM needed) plans and fuses the
model four times (:func:`texscope.backend.tuning.measured.plan_profiles`: the
target's cost profile, every eligible tensor in a texture, none, the maps in
textures and the weights in buffers), as :func:`texscope.build` does, and
collects the fused kernels.  A kernel is known by its PrimFunc with every parameter a global
buffer (:func:`texscope.backend.schedules.scope_variants.plain`), hashed: the same
computation wherever it is called, whatever its operands' storages.  Its
variants are every combination of the storages seen for each tensor
operand (the data in, the weights, the output) in
those plans; each variant is one call of the kernel in one Relax module,
its operands on the variant's VDevices, built through the build's own
passes after fusion (specialization, scheduling, lowering): the kernel as
the final build builds it.  The copies a plan could need (each texture
flavour's tensor shapes, both ways) are calls of ``to_vdevice`` in the same
module.  Identical (kernel, storages) pairs are built once.  Beside them go
the model's own all-buffer and all-texture programs, built as
:func:`texscope.build` builds them (``in-place/``): a kernel's time in the
set is not its time in the model (another kernel ran before it, other data
sits in the caches), and the tuner runs these two whole so that the planner
can scale the set's prices to the model's (:mod:`texscope.planner.tuned`).

The set is a portable program (``program/``: plan.json, kernels.cl,
weights.npz) and a manifest, ``tuning-set.json``, naming the binding of each
variant and copy; ``python -m texscope.opencl.tune DIR`` times them on the
device (numpy and pyopencl only).
"""

from __future__ import annotations

import datetime
import itertools
import json
import math
import time
from pathlib import Path

import attrs
import tvm
from tvm import relax

from ...errors import TexscopeError
from ...ir.graph import CALL_TIR, static_dims, static_shape
from ...ir.rebuild import with_vdevice
from ...knowledge.profile import extreme_profiles
from ...knowledge.targets import VDeviceTable, host_target, is_texture_scope, texture_target
from ...opencl import neighbours, tuning as tuning_format
from ...opencl.executor import plan_of
from ...diagnostics.report import Report
from ..build import (TIR_PIPELINE_MANY_KERNELS, BuildResult, after_fusion_passes, build,
                     compile_opencl)
from ..fusion import run_under
from .measured import (check_belongs, fused_kernels, kernel_key, model_fingerprint,
                       plan_profiles, target_label)

MOST_VARIANTS = 16  # per kernel: beyond it, the plans' combinations and their neighbours


def tensor_operands(call: relax.Call, ty) -> list:
    """A fused kernel call's tensor operands, in order (``in<i>`` a
    variable, ``w<i>`` a constant: folded weights), then its outputs
    (``out<i>``): [(position, type)]."""
    operands = [(f"{'in' if isinstance(arg, relax.Var) else 'w'}{i}", arg.ty)
                for i, arg in enumerate(call.args[1].fields)
                if isinstance(arg.ty, relax.TensorType)]
    outputs = ty.fields if isinstance(ty, relax.TupleType) else [ty]
    return operands + [(f"out{i}", out) for i, out in enumerate(outputs)]


def _scope(ty) -> str:
    vdevice = getattr(ty, "vdevice", None)
    return str(vdevice.memory_scope) if vdevice is not None else "global"


class _Collector:
    """The fused kernels of several plans: per kernel, its PrimFunc, and
    per operand position the storages seen."""

    def __init__(self):
        self.kernels: dict[str, dict] = {}
        self.copies: dict[tuple, dict] = {}

    def add(self, mod: tvm.IRModule) -> None:
        for binding in (b for block in mod["main"].body.blocks for b in block.bindings):
            call = binding.value
            if not (isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op)
                    and call.op.name == CALL_TIR):
                continue
            func = mod[call.args[0]]
            operands = tensor_operands(call, binding.var.ty)
            if any(static_shape(ty) is None for _, ty in operands):
                continue  # symbolic sizes: not tuned (the cost profile prices it)
            key = kernel_key(func)
            entry = self.kernels.setdefault(key, {
                "func": func, "name": call.args[0].name_hint,
                "types": [ty for _, ty in operands],
                "positions": [p for p, _ in operands],
                "scopes": [set() for _ in operands]})
            entry.setdefault("seen", set()).add(tuple(_scope(ty) for _, ty in operands))
            for seen, (_, ty) in zip(entry["scopes"], operands):
                seen.add(_scope(ty))
                if is_texture_scope(_scope(ty)):
                    shape = static_shape(ty)
                    self.copies[(shape, str(ty.dtype), _scope(ty))] = ty

    def variants(self, key: str) -> list[tuple[str, ...]]:
        """Every combination of the storages seen per position; where that
        is more than :data:`MOST_VARIANTS`, the combinations the plans made
        and each of them with one position changed."""
        entry = self.kernels[key]
        choices = [sorted(s) for s in entry["scopes"]]
        if math.prod(map(len, choices)) <= MOST_VARIANTS:
            return list(itertools.product(*choices))
        combos = set(entry["seen"])
        for seen in entry["seen"]:
            for position, scopes in enumerate(choices):
                combos.update(seen[:position] + (scope,) + seen[position + 1:] for scope in scopes)
        return sorted(combos)


def _declared_once(source: str) -> str:
    """``source`` with each kernel prototype once: every lowered module of
    the build declares every kernel, so a set of hundreds of kernels would
    repeat hundreds of declarations hundreds of times."""
    seen, lines = set(), []
    for line in source.splitlines():
        if line.startswith("__kernel ") and line.endswith(");"):
            if line in seen:
                continue
            seen.add(line)
        lines.append(line)
    return "\n".join(lines) + "\n"


def tuning_module(collector: _Collector, vdevices: VDeviceTable, global_infos):
    """One Relax function calling every variant and copy once; returns the
    module and the manifest's variant and copy entries (binding names)."""
    params, calls, variants, copies = [], [], [], []

    def param(ty, scope):
        var = relax.Var(f"p{len(params)}", with_vdevice(ty, vdevices[scope]))
        params.append(var)
        return var

    for key, entry in sorted(collector.kernels.items()):
        n_in = sum(not p.startswith("out") for p in entry["positions"])
        for combo in collector.variants(key):
            # Weights too are parameters here: their values do not change the time.
            args = [param(ty, scope) for ty, scope in zip(entry["types"][:n_in], combo[:n_in])]
            outs = [with_vdevice(ty, vdevices[scope])
                    for ty, scope in zip(entry["types"][n_in:], combo[n_in:])]
            name = f"v{len(variants)}"
            calls.append((name, key, args, outs))
            # The weights' parameters: a tuner leaves them as a model does
            # (written once, not by the kernel before; texscope.opencl.neighbours).
            weights = [arg.name for arg, position in zip(args, entry["positions"])
                       if position.startswith("w")]
            variants.append({"kernel": key, "scopes": list(combo), "binding": name,
                             "weights": weights})
    for (shape, dtype, scope), ty in sorted(collector.copies.items()):
        for source, target in ((scope, "global"), ("global", scope)):
            name = f"c{len(copies)}"
            calls.append((name, None, [param(ty, source)], target))
            copies.append({"shape": list(shape), "dtype": dtype, "source": source,
                           "target": target, "binding": name})
    infos = dict(global_infos.items()) if global_infos is not None else {}
    infos["vdevice"] = vdevices.listed()
    builder = relax.BlockBuilder(tvm.IRModule({}, global_infos=infos))
    gvars = {key: builder.add_func(entry["func"], f"k_{key}")
             for key, entry in sorted(collector.kernels.items())}
    with builder.function("main", params):
        outputs = []
        for name, key, args, outs in calls:
            if key is None:
                value = relax.op.to_vdevice(args[0], vdevices[outs])
            else:
                value = relax.call_tir(gvars[key], relax.Tuple(args),
                                       outs if len(outs) > 1 else outs[0])
            outputs.append(builder.emit(value, name_hint=name))
        builder.emit_func_output(relax.Tuple(outputs))
    return builder.get(), variants, copies


def export(mod: tvm.IRModule, target, directory, model: str, log=print,
           previous=None) -> Path:
    """Write ``mod``'s tuning set for ``target`` into ``directory`` (new or
    empty); returns the manifest's path.  ``previous``, a tuning file of
    this model (parsed and checked: :func:`texscope.opencl.tuning.load`):
    the plan it chooses goes beside the extremes, to be run whole."""
    root = Path(directory)
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise TexscopeError(f"{root} exists and is not an empty folder; not writing into it")
    start = time.perf_counter()
    texture = texture_target(target)
    if texture.kind != "opencl":
        raise TexscopeError(f"texscope tune times OpenCL kernels; {target!r} is {texture.kind}")
    if previous is not None:  # before anything is written
        check_belongs(mod, texture, previous, previous.get("origin", "the previous tuning"))
    device_target = tvm.target.Target(texture.target, host=host_target(None, texture.target))
    collector = _Collector()
    fused_any = None
    for label, profile in plan_profiles(texture).items():
        fused_any, _, _ = fused_kernels(mod, device_target, profile)
        collector.add(fused_any)
        log(f"  planned and fused ({label}): {len(collector.kernels)} kernels so far")
    if not collector.kernels:
        raise TexscopeError("the model has no kernel of static shape to tune")
    vdevices = VDeviceTable(texture_target(device_target))
    tuning, variants, copies = tuning_module(collector, vdevices, fused_any.global_infos)
    figures: dict = {}
    with device_target:
        optimized = run_under(device_target, [tvm.tirx.transform.BindTarget(device_target),
                                           *after_fusion_passes()], "texscope.tune")(tuning)
    executable, source, lowered = compile_opencl(optimized, device_target, figures,
                                                 tir_pipeline=TIR_PIPELINE_MANY_KERNELS)
    label = target_label(target)
    result = BuildResult(executable, source, Report.from_plans(label, {}, figures),
                         optimized, lowered)
    plan = plan_of(result)
    plan = attrs.evolve(plan, source=_declared_once(plan.source))
    (root / tuning_format.PROGRAM).mkdir(parents=True)
    plan.write(root / tuning_format.PROGRAM)
    (root / tuning_format.NEIGHBOURS).write_text(neighbours.SOURCE)
    in_place = _in_place_programs(mod, target, texture, root, previous)
    log(f"  the model's {', '.join(in_place['programs'])} programs built, to run whole")
    kernels = {key: {"name": entry["name"], "positions": entry["positions"],
                     "shapes": [list(static_dims(ty.shape)) for ty in entry["types"]],
                     "scopes": [sorted(s) for s in entry["scopes"]]}
               for key, entry in sorted(collector.kernels.items())}
    manifest = {
        "format": tuning_format.SET_FORMAT,
        "version": tuning_format.VERSION,
        "model": model,
        "model_fingerprint": model_fingerprint(mod),
        "target": label,
        "created_by": "texscope tune",
        "created_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "build_s": round(time.perf_counter() - start, 2),
        "kernels": kernels,
        "variants": variants,
        "copies": copies,
        "in_place": in_place,
        **({"previous_tuning": {k: v for k, v in previous.items() if k != "origin"}}
           if previous is not None else {}),
    }
    path = root / tuning_format.SET_MANIFEST
    path.write_text(json.dumps(manifest, indent=1) + "\n")
    log(f"  {len(kernels)} kernels, {len(variants)} variants, {len(copies)} copies "
        f"in {manifest['build_s']} s")
    return path


def _in_place_programs(mod: tvm.IRModule, target, texture, root: Path, previous) -> dict:
    """Build ``mod``'s all-buffer and all-texture plans (the extremes the
    planner's guard weighs), the plan ``previous`` chooses where given, and
    the plan the target's cost profile chooses (the build without a tuning
    file: the tuned plan is weighed against it too) where none of those is
    its program, into ``root``/in-place; the manifest's entry."""
    profiles = extreme_profiles(texture.profile)
    builds = {label: {"profile": profiles[label]} for label in tuning_format.IN_PLACE_LABELS}
    builds[tuning_format.DEFAULT] = {}
    if previous is not None:
        builds[tuning_format.PREVIOUS] = {"tuning": previous}  # refused if another model's
    built = {label: plan_of(build(mod, target, **how)) for label, how in builds.items()}
    if any(built[tuning_format.DEFAULT] == program for label, program in built.items()
           if label != tuning_format.DEFAULT):
        del built[tuning_format.DEFAULT]  # run whole already, under that plan's label
    programs = {}
    for label, program in built.items():
        folder = Path(tuning_format.IN_PLACE) / label
        (root / folder).mkdir(parents=True)
        program.write(root / folder)
        programs[label] = folder.as_posix()
    # A build under another cost profile plans another default: it weighs none.
    chosen_by = ({tuning_format.DEFAULT_PROFILE: texture.profile.digest}
                 if tuning_format.DEFAULT in programs else {})
    return {"function": "main", **chosen_by, "programs": programs}
