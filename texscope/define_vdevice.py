"""Stage 4: write the storage decisions into the IR.

Every call's ``ty_args`` (``out_ty`` for ``call_tir``) carries a VDevice with
the scope its output is written in; parameters and constants carry theirs;
the module's ``global_infos["vdevice"]`` lists the VDevices.  A tensor
argument read in another scope than its own is read through an
``R.to_vdevice`` copy (one per block, shared by its readers), exactly what
``RealizeVDevice`` would make of an ``R.hint_on_device``: writing the copies
directly spares stage 5 realizing a hint per argument and then removing the
assignments left for the arguments already in place (most of the annotation's
time, done that way).  Only an argument on no VDevice gets a hint.
"""

from __future__ import annotations

from collections.abc import Mapping

import tvm
from tvm import relax

from .collect_producer import ProducerInfo
from .ir.graph import DPS_OPS, Constant, dps_inputs, new_call
from .ir.rebuild import Rebuilder, replace_functions, with_vdevice
from .knowledge.targets import TextureTarget, VDeviceTable
from .tvm_workarounds.known_type import with_known_type


class _FunctionRewriter:
    def __init__(self, mod: tvm.IRModule, plan: ProducerInfo, vdevices: VDeviceTable,
                 device: tvm.runtime.Device):
        self.plan = plan
        self.graph = plan.graph
        self.vdevices = vdevices
        self.device = device
        self.rebuilder = Rebuilder(mod)
        self.calls = 0
        self.hints: dict = {}

    def vdevice_of(self, tensor: int) -> relax.VDevice:
        return self.vdevices[self.plan.choices[tensor].scope]

    def annotate_output(self, ty, outputs: tuple[int, ...]):
        if not outputs:
            return ty
        if isinstance(ty, relax.TensorType):
            return with_vdevice(ty, self.vdevice_of(outputs[0]))
        return relax.TupleType(
            [with_vdevice(field, self.vdevice_of(t)) for field, t in zip(ty.fields, outputs)]
        )

    def hinted(self, arg: relax.Expr, tensor: int | None, scope: str | None) -> relax.Expr:
        """``arg`` as its reader wants it: itself where it lives in ``scope``
        already, else a copy (``to_vdevice``), what ``RealizeVDevice`` would
        make of a hint; a hint only for a tensor that lives on no VDevice."""
        arg = self.rebuilder.substitute(arg)
        if tensor is None or scope is None:
            return arg
        vdevice = self.vdevices[scope]  # listed even when only a copy lives there
        current = getattr(arg.ty, "vdevice", None)
        # By identity, as RealizeVDevice compares (VDevice.same_as recurses in TVM 0.27).
        if current is not None and current.__chandle__() == vdevice.__chandle__():
            return arg
        # Shared by the block's later readers; a dataflow var does not outlive its block.
        key = (self.rebuilder.block, tensor, scope)
        if key not in self.hints:
            source = self.graph.tensors[tensor].name.replace("[", "_").replace("]", "")
            name = f"{source}_{scope.replace('global.', '').replace('-', '_')}"
            if current is None:
                value = relax.op.hint_on_device(arg, self.device, scope)
            else:
                value = relax.op.to_vdevice(arg, vdevice)
            self.hints[key] = self.rebuilder.emit(name, value)
        return self.hints[key]

    def rewrite_call(self, call: relax.Call) -> relax.Call:
        site = self.graph.calls[self.calls]
        reads = self.plan.reads[self.calls]
        self.calls += 1
        inputs = [
            self.hinted(arg, tensor, scope)
            for arg, tensor, scope in zip(dps_inputs(call), site.operands, reads)
        ]
        if isinstance(call.op, relax.GlobalVar):
            return new_call(call.op, inputs, call.attrs, call.ty_args)
        if call.op.name in DPS_OPS:
            rest = [self.rebuilder.substitute(a) for a in call.args[2:]]
            out_ty = self.annotate_output(call.ty_args[0], site.outputs)
            return new_call(call.op, [call.args[0], relax.Tuple(inputs), *rest], call.attrs,
                            [out_ty])
        # Other operators take their output VDevice from ty_args (the design's trick).
        out_ty = self.annotate_output(call.ty, site.outputs)
        rewritten = new_call(call.op, inputs, call.attrs, [out_ty])
        # Its type is known: the old one on the planned VDevice.  Inferring
        # it again costs ~5 ms per packed conv2d in TVM 0.27 (layout parsing).
        if all(isinstance(a, (relax.Var, Constant)) for a in inputs):
            with_known_type(rewritten, out_ty)
        return rewritten

    def rewrite(self, binding: relax.Binding) -> relax.Expr:
        if isinstance(binding.value, relax.Call):
            return self.rewrite_call(binding.value)
        return self.rebuilder.substitute(binding.value)

    def param_type(self, ty, tensor):
        """``ty`` with each of its tensors on its planned VDevice (a tuple
        parameter's fields too: a lifted weight transform takes one)."""
        if isinstance(tensor, int):
            return with_vdevice(ty, self.vdevice_of(tensor))
        if isinstance(tensor, tuple) and isinstance(ty, relax.TupleType):
            return relax.TupleType([self.param_type(field, t)
                                    for field, t in zip(ty.fields, tensor)])
        return ty

    def run(self, func: relax.Function) -> relax.Function:
        params = []
        for param, tensor in zip(func.params, self.graph.params):
            if isinstance(tensor, (int, tuple)):
                new = relax.Var(param.name, self.param_type(param.ty, tensor))
                self.rebuilder.var_map[param] = new
                param = new
            params.append(param)
        for constant, tensor in self.graph.constants.items():
            self.rebuilder.var_map[constant] = Constant(
                constant.value, with_vdevice(constant.ty, self.vdevice_of(tensor))
            )
        return self.rebuilder.run(func, params, self.rewrite)


def define_vdevice(
    mod: tvm.IRModule, plans: Mapping[str, ProducerInfo], texture: TextureTarget
) -> tvm.IRModule:
    """Stage 4: return a new module with the decisions of ``plans`` written in.

    Parameters
    ----------
    mod : IRModule
        The module the plans were made from; it is not modified.
    plans : mapping of str to ProducerInfo
        Per Relax function name, its stage-3 result.
    texture : TextureTarget
        The target whose VDevices are used.

    Returns
    -------
    IRModule
        A module with hints, ``ty_args`` and ``global_infos["vdevice"]``.
    """
    vdevices = VDeviceTable(texture)
    rewritten = {}
    for gvar in sorted(mod.functions, key=lambda g: g.name_hint):
        plan = plans.get(gvar.name_hint)
        if plan is not None:
            rewritten[gvar] = _FunctionRewriter(mod, plan, vdevices, texture.device).run(mod[gvar])
    return replace_functions(mod, rewritten, {"vdevice": vdevices.listed()})
