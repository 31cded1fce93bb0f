"""Weight packing moved out of the model's run, into a function run once.

Stage 1 packs every conv weight into OIHW4o.  A weight that is a constant is
packed at build time (folded); a weight that is a parameter is packed by a
kernel on every run, into a tensor the all-buffer build never allocates: on
a chain of 64 convs with parameter weights, one packed weight (36 KiB) above
TVM's generic build at the peak.

Where a Relax function says which of its parameters are weights (TVM's
``num_input`` attribute: the parameters after the first ``num_input``),
:func:`LiftWeightTransforms` runs Relax's ``LiftTransformParams`` on stage
1's output: everything computed from weights alone (packing, padding,
casts) moves into ``<function>_transform_params``, which takes the weights
as one tuple and returns the packed tensors, and the function takes those
in their place.  A user runs the transform once when loading the weights,
and passes its results to every run (TVM's convention for lifted weights).

Relax's pass rebuilds the whole function with new variables
(``CopyWithNewVars``): on the 64-conv chain that is 50 ms where it lifts a
single weight, 100 ms where it lifts all 64.  :func:`lifted_function`
gives TVM's pass a skeleton of the function, the lifted bindings alone (its
transform function is then TVM's own), and writes the function's new body
from its old bindings, the lifted values read from the new parameters, then
canonicalizes the bindings as TVM's pass does: 10 ms.  The module is the
one TVM's pass makes (a test compares them on the zoo).  A function with
what the shortcut does not model (symbolic shapes, bindings outside
dataflow blocks that read weights, ``stop_lift_params``) goes to TVM's pass
whole.

The packed weights are the function's parameters then, and a caller hands
the VM buffers: the planner keeps a weight parameter in a buffer
(:func:`texscope.collect_producer.writable`), so that nothing is copied into
an image on every run; the conv reads its weight from the buffer.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import relax

from ..errors import TexscopeError
from ..ir.graph import NUM_INPUT, inputs_and_weights, vars_read
from ..tvm_workarounds.known_type import with_known_type

_STOP_LIFT = "relax.builtin.stop_lift_params"


def require_declared_weights(mod: tvm.IRModule) -> list[relax.GlobalVar]:
    """The Relax functions of ``mod`` declaring weights (``num_input``).

    Raises TexscopeError where none does (texscope cannot tell weights from
    inputs), where a ``num_input`` counts more parameters than its function
    has, or where a function's ``_transform_params`` name is taken.
    """
    declaring = []
    names = {gvar.name_hint for gvar in mod.functions}
    for gvar, func in mod.functions.items():
        if not isinstance(func, relax.Function) or func.attrs is None \
                or NUM_INPUT not in func.attrs:
            continue
        count = func.attrs[NUM_INPUT]
        if not isinstance(count, (int, tvm.tirx.IntImm)) or not 0 <= int(count) <= len(func.params):
            raise TexscopeError(
                f"attribute num_input={count!r} must count the function's leading inputs "
                f"(0 to {len(func.params)})", gvar.name_hint)
        if f"{gvar.name_hint}_transform_params" in names:
            raise TexscopeError(f"the module already has a function "
                                f"'{gvar.name_hint}_transform_params', the name its lifted "
                                "weight transforms take", gvar.name_hint)
        declaring.append(gvar)
    if not declaring:
        raise TexscopeError(
            "lifting weight transforms needs the model's function to say which parameters are "
            "weights: set the attribute num_input (the count of leading inputs; the parameters "
            "after them are weights), e.g. mod['main'] = mod['main'].with_attr('num_input', 1); "
            "weights that are constants (an imported .tflite's) are packed at build time already")
    return declaring


class _Unmodelled(Exception):
    """The function holds something the shortcut does not model."""


def _computable(func: relax.Function) -> tuple[list, set, set]:
    """TVM's rules: the bindings computable from weights and constants alone
    (dataflow bindings reading only such variables), those of them that read
    a weight (directly or not), and the variables ``func`` needs at run time
    (read by the bindings that stay, or returned)."""
    _, weights = inputs_and_weights(func)
    computable, liftable, needs_weight, stays = [], set(weights), set(weights), []
    for block in func.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if not isinstance(binding, relax.VarBinding) or isinstance(
                    value, (relax.If, relax.SeqExpr, relax.Function, relax.ExternFunc)):
                raise _Unmodelled
            if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) \
                    and value.op.name == _STOP_LIFT:
                raise _Unmodelled
            reads = vars_read(value)
            if isinstance(block, relax.DataflowBlock) and all(v in liftable for v in reads):
                computable.append(binding)
                liftable.add(binding.var)
                if any(v in needs_weight for v in reads):
                    needs_weight.add(binding.var)
                    continue
            elif any(v in needs_weight for v in reads) and not isinstance(block, relax.DataflowBlock):
                raise _Unmodelled
            stays.append(binding)
    needed = {v for b in stays for v in vars_read(b.value)} | set(vars_read(func.body.body))
    return computable, needs_weight, needed


def _transform_outputs(func: relax.Function, computable: list, needs_weight: set,
                       needed: set) -> list:
    """What the transform returns, in TVM's order: the weights the function
    still reads, in order, then the computed tensors it reads, in order."""
    return [p for p in inputs_and_weights(func)[1] if p in needed] + [
        b.var for b in computable if b.var in needs_weight and b.var in needed]


def _skeleton(func: relax.Function, computable: list, outputs: list) -> relax.Function:
    """``func`` reduced to its computable bindings, returning ``outputs`` and
    its first input (so that the tuple is a run-time value): TVM's pass lifts
    from it the transform it would lift from ``func``."""
    result = relax.Tuple([*outputs, func.params[0]])
    returned = relax.Var("skeleton_outputs", result.ty)
    body = relax.SeqExpr([relax.DataflowBlock([*computable, relax.VarBinding(returned, result)])],
                         returned)
    return relax.Function(func.params, body, result.ty, func.is_pure, func.attrs)


def lifted_function(mod: tvm.IRModule, gvar: relax.GlobalVar) -> tvm.IRModule | None:
    """``mod`` with ``gvar``'s weight transforms lifted as TVM's pass lifts
    them (see the module docstring); None where the shortcut does not model
    the function."""
    func = mod[gvar]
    inputs, _ = inputs_and_weights(func)
    if relax.analysis.defined_symbolic_vars(func) or not inputs:
        return None
    try:
        computable, needs_weight, needed = _computable(func)
    except _Unmodelled:
        return None
    outputs = _transform_outputs(func, computable, needs_weight, needed)
    others = {g: f for g, f in mod.functions.items() if not g.same_as(gvar)}
    skeleton = tvm.IRModule({**others, gvar: _skeleton(func, computable, outputs)},
                            attrs=mod.attrs, global_infos=mod.global_infos)
    lifted = relax.transform.LiftTransformParams()(skeleton)
    new_params = list(lifted[gvar.name_hint].params)
    if len(new_params) != len(inputs) + len(outputs) or any(
            old.name != new.name for old, new in zip([*inputs, *outputs], new_params)):
        return None
    replaced = dict(zip([*inputs, *outputs], new_params))
    gone = {b.var for b in computable if b.var in needs_weight}
    blocks = []
    for block in func.body.blocks:
        kept = [b for b in block.bindings if b.var not in gone]
        if kept:
            blocks.append(type(block)(kept))
    body = relax.SeqExpr(blocks, func.body.body)
    with_known_type(body, func.body.ty)
    body = tvm_ffi.structural_map(body, (relax.Var, lambda var: replaced.get(var, var)))
    functions = {g: f for g, f in lifted.functions.items() if g.name_hint != gvar.name_hint}
    # TVM's pass canonicalizes the bindings it keeps too (a tuple's field
    # read through the tuple reads the field itself).
    alone = tvm.IRModule({gvar: relax.Function(new_params, body, func.ret_ty, func.is_pure,
                                               func.attrs)})
    functions[gvar] = relax.transform.CanonicalizeBindings()(alone)[gvar]
    return tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos)


@tvm.transform.module_pass(opt_level=0, name="texscope.LiftWeightTransforms")
def LiftWeightTransforms(mod: tvm.IRModule, _ctx) -> tvm.IRModule:  # pylint: disable=invalid-name
    """What each function with ``num_input`` computes from its weights alone,
    lifted into ``<function>_transform_params`` (see the module docstring);
    :func:`require_declared_weights` first."""
    declaring = require_declared_weights(mod)
    if len(declaring) == 1:
        shortcut = lifted_function(mod, declaring[0])
        if shortcut is not None:
            return shortcut
    return relax.transform.LiftTransformParams()(mod)
