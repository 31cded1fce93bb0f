"""Stage 4: write the storage decisions into the IR.

Every tensor argument of every call is wrapped in ``R.hint_on_device`` with the
scope its consumer reads; every call's ``ty_args`` (``out_ty`` for
``call_tir``) carries a VDevice with the scope its output is written in;
parameters and constants carry theirs; the module's ``global_infos["vdevice"]``
lists the VDevices.  Stage 5 turns hints into copies or nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

import tvm
from tvm import relax

from .collect_producer import ProducerInfo
from .graph import DPS_OPS, dps_inputs
from .rebuild import Constant, Rebuilder, replace_functions, with_vdevice
from .targets import TextureTarget, VDeviceTable


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
        arg = self.rebuilder.substitute(arg)
        if tensor is None or scope is None:
            return arg
        # Shared by the block's later readers; a dataflow var does not outlive its block.
        key = (self.rebuilder.block, tensor, scope)
        if key not in self.hints:
            self.vdevices[scope]  # listed even when only a copy lives there
            source = self.graph.tensors[tensor].name.replace("[", "_").replace("]", "")
            name = f"{source}_{scope.replace('global.', '').replace('-', '_')}"
            self.hints[key] = self.rebuilder.emit(
                name, relax.op.hint_on_device(arg, self.device, scope)
            )
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
            return relax.Call(call.op, inputs, call.attrs, call.ty_args)
        if call.op.name in DPS_OPS:
            rest = [self.rebuilder.substitute(a) for a in call.args[2:]]
            out_ty = self.annotate_output(call.ty_args[0], site.outputs)
            return relax.Call(call.op, [call.args[0], relax.Tuple(inputs), *rest], call.attrs,
                              [out_ty])
        # Other operators take their output VDevice from ty_args (the design's trick).
        return relax.Call(call.op, inputs, call.attrs, [self.annotate_output(call.ty, site.outputs)])

    def rewrite(self, binding: relax.Binding) -> relax.Expr:
        if isinstance(binding.value, relax.Call):
            return self.rewrite_call(binding.value)
        return self.rebuilder.substitute(binding.value)

    def run(self, func: relax.Function) -> relax.Function:
        params = []
        for param, tensor in zip(func.params, self.graph.params):
            if isinstance(tensor, int):
                new = relax.Var(param.name, with_vdevice(param.ty, self.vdevice_of(tensor)))
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
