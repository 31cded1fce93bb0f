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
from .graph import DPS_OPS, Constant
from .targets import TextureTarget, VDeviceTable

def _with_vdevice(ty: relax.TensorType, vdevice: relax.VDevice) -> relax.TensorType:
    return relax.TensorType(ty.shape, ty.dtype, vdevice)


class _FunctionRewriter:
    def __init__(self, mod: tvm.IRModule, plan: ProducerInfo, vdevices: VDeviceTable,
                 device: tvm.runtime.Device):
        self.mod = mod
        self.plan = plan
        self.graph = plan.graph
        self.vdevices = vdevices
        self.device = device
        self.builder = relax.BlockBuilder(mod)
        self.var_map: dict[relax.Var, relax.Var] = {}
        self.constants: dict[Constant, Constant] = {}

    def vdevice_of(self, tensor: int) -> relax.VDevice:
        return self.vdevices[self.plan.choices[tensor].scope]

    def substitute(self, expr: relax.Expr) -> relax.Expr:
        if isinstance(expr, relax.Var):
            return self.var_map.get(expr, expr)
        if isinstance(expr, Constant):
            return self.constants.get(expr, expr)
        if isinstance(expr, relax.Tuple):
            return relax.Tuple([self.substitute(f) for f in expr.fields])
        if isinstance(expr, relax.TupleGetItem):
            return relax.TupleGetItem(self.substitute(expr.tuple_value), expr.index)
        return expr

    def annotate_output(self, ty, outputs: tuple[int, ...]):
        if not outputs:
            return ty
        if isinstance(ty, relax.TensorType):
            return _with_vdevice(ty, self.vdevice_of(outputs[0]))
        return relax.TupleType(
            [_with_vdevice(field, self.vdevice_of(t)) for field, t in zip(ty.fields, outputs)]
        )

    def hinted(self, arg: relax.Expr, tensor: int | None, scope: str | None, hints, bindings):
        arg = self.substitute(arg)
        if tensor is None or scope is None:
            return arg
        key = (tensor, scope)
        if key not in hints:
            name = f"{self.graph.tensors[tensor].name.replace('[', '_').replace(']', '')}_" + (
                scope.replace("global.", "").replace("-", "_")
            )
            value = self.builder.normalize(relax.op.hint_on_device(arg, self.device, scope))
            var = relax.DataflowVar(name, value.ty)
            bindings.append(relax.VarBinding(var, value))
            hints[key] = var
        return hints[key]

    def rewrite_call(self, call: relax.Call, site_index: int, hints, bindings) -> relax.Call:
        site = self.graph.calls[site_index]
        reads = self.plan.reads[site_index]
        inputs = [
            self.hinted(arg, tensor, scope, hints, bindings)
            for arg, tensor, scope in zip(_kernel_inputs(call), site.operands, reads)
        ]
        if isinstance(call.op, relax.GlobalVar):
            return relax.Call(call.op, inputs, call.attrs, call.ty_args)
        if call.op.name in DPS_OPS:
            args = [call.args[0], relax.Tuple(inputs), *map(self.substitute, call.args[2:])]
            out_ty = self.annotate_output(call.ty_args[0], site.outputs)
            return relax.Call(call.op, args, call.attrs, [out_ty])
        out_ty = self.annotate_output(call.ty, site.outputs)
        return relax.Call(call.op, inputs, call.attrs, [out_ty])

    def rewrite_param(self, param: relax.Var, tensor) -> relax.Var:
        if not isinstance(tensor, int):
            return param
        new = relax.Var(param.name, _with_vdevice(param.ty, self.vdevice_of(tensor)))
        self.var_map[param] = new
        return new

    def run(self, func: relax.Function) -> relax.Function:
        params = [self.rewrite_param(p, t) for p, t in zip(func.params, self.graph.params)]
        for constant, tensor in self.graph.constants.items():
            self.constants[constant] = Constant(
                constant.data, _with_vdevice(constant.ty, self.vdevice_of(tensor))
            )
        calls = 0
        blocks = []
        for block in func.body.blocks:
            hints: dict = {}
            bindings: list = []
            for binding in block.bindings:
                var, value = binding.var, binding.value
                if isinstance(value, relax.Call):
                    value = self.rewrite_call(value, calls, hints, bindings)
                    calls += 1
                else:
                    value = self.substitute(value)
                value = self.builder.normalize(value)
                if isinstance(binding, relax.MatchCast):
                    new_var = type(var)(var.name, var.ty)
                    bindings.append(relax.MatchCast(new_var, value, binding.ty))
                else:
                    new_var = type(var)(var.name, value.ty)
                    bindings.append(relax.VarBinding(new_var, value))
                self.var_map[var] = new_var
            block_type = relax.DataflowBlock if isinstance(block, relax.DataflowBlock) else relax.BindingBlock
            blocks.append(block_type(bindings))
        body = self.builder.normalize(relax.SeqExpr(blocks, self.substitute(func.body.body)))
        return relax.Function(params, body, body.ty, func.is_pure, func.attrs)


def _kernel_inputs(call: relax.Call) -> list[relax.Expr]:
    if isinstance(call.op, tvm.ir.Op) and call.op.name in DPS_OPS:
        return list(call.args[1].fields)
    return list(call.args)


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
    functions = dict(mod.functions)
    for gvar in sorted(functions, key=lambda g: g.name_hint):
        plan = plans.get(gvar.name_hint)
        if plan is not None:
            rewriter = _FunctionRewriter(mod, plan, vdevices, texture.device)
            functions[gvar] = rewriter.run(functions[gvar])
    global_infos = dict(mod.global_infos)
    global_infos["vdevice"] = vdevices.listed()
    return tvm.IRModule(functions, attrs=mod.attrs, global_infos=global_infos)
