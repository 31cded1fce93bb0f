"""The model's own tensor names through stage 1.

Stage 1 (decomposition, layout conversion, legalization) emits temporaries
with a fresh-name counter that knows nothing of the model's names, so a
decomposed model holds several ``lv3``, none of them necessarily the model's.
:func:`ConvertKeepingNames` marks every variable of the model before stage 1,
then gives the model's variables their names back and names each temporary
after the model tensor it comes from (``stem_bn_var_sqrt``), unique per
function.
"""

from __future__ import annotations

import re

import tvm
import tvm_ffi
from tvm import relax

from ..convert_layout import ConvertToPackedLayout
from ..errors import TexscopeError
from ..ir.graph import CALL_TIR, dps_inputs, handle, relax_bindings

_MARKER = re.compile(r"__texscope_(\d+)__")
# Prefixes and numbering TVM gives the PrimFuncs it legalizes to.
_KERNEL_NAME = re.compile(r"^(?:te_|tir_)?(.*?)\d*$")


def _relax_functions(mod: tvm.IRModule):
    return [(g, f) for g, f in mod.functions.items() if isinstance(f, relax.Function)]


def _renamed(func: relax.Function, names: dict) -> relax.Function:
    """``func`` with each variable whose :func:`handle` ``names`` keys
    replaced by one named anew."""
    memo = {}

    def rename(var):
        key = handle(var)
        new = memo.get(key)
        if new is None:
            name = names.get(key)
            if name is None:
                return var
            kind = relax.DataflowVar if isinstance(var, relax.DataflowVar) else relax.Var
            new = memo[key] = kind(name, var.ty)
        return new

    return tvm_ffi.structural_map(func, (relax.Var, rename))


def mark_names(mod: tvm.IRModule) -> tuple[tvm.IRModule, list[str]]:
    """Every Relax variable renamed to a numbered marker; the names, by number."""
    originals: list[str] = []
    functions = dict(mod.functions)
    for gvar, func in _relax_functions(mod):
        names = {}
        for var in [*func.params, *(b.var for _, b in relax_bindings(mod, [gvar]))]:
            names[handle(var)] = f"__texscope_{len(originals)}__"
            originals.append(var.name)
        functions[gvar] = _renamed(func, names)
    return tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos), originals


def _operation(value) -> str:
    if isinstance(value, relax.Call):
        if isinstance(value.op, tvm.ir.Op) and value.op.name == CALL_TIR:
            return _KERNEL_NAME.match(value.args[0].name_hint).group(1) or "kernel"
        if isinstance(value.op, tvm.ir.Op):
            return value.op.name.rsplit(".", 1)[-1]
        return getattr(value.op, "name_hint", "call")
    if isinstance(value, relax.TupleGetItem):
        return f"field{value.index}"
    return "value"


def _sources(value) -> list:
    if isinstance(value, relax.Call):
        return dps_inputs(value)
    if isinstance(value, relax.TupleGetItem):
        return [value.tuple_value]
    if isinstance(value, relax.Tuple):
        return value.fields[:]
    return [value]


def _unique(base: str, taken: set) -> str:
    name, count = base, 1
    while name in taken:
        count += 1
        name = f"{base}_{count}"
    taken.add(name)
    return name


def restore_names(mod: tvm.IRModule, originals: list[str]) -> tvm.IRModule:
    """The model's variables named as in the model, stage-1 temporaries named
    ``<model tensor>_<operation>``; every name unique within its function."""
    functions = dict(mod.functions)
    for gvar, func in _relax_functions(mod):
        variables = [*func.params, *(b.var for _, b in relax_bindings(mod, [gvar]))]
        marked = {handle(v): int(m.group(1))
                  for v in variables if (m := _MARKER.fullmatch(v.name))}
        taken: set = set()
        names, root = {}, {}
        for var in variables:  # the model's names first: temporaries never take one
            key = handle(var)
            if key in marked:
                names[key] = root[key] = _unique(originals[marked[key]], taken)
        for _, binding in relax_bindings(mod, [gvar]):
            key = handle(binding.var)
            if key in names:
                continue
            found = _MARKER.search(binding.var.name)
            source = originals[int(found.group(1))] if found else next(
                (root[handle(s)] for s in _sources(binding.value)
                 if isinstance(s, relax.Var) and handle(s) in root),
                None)
            operation = _operation(binding.value)
            root[key] = source or operation
            names[key] = _unique(f"{source}_{operation}" if source else operation, taken)
        functions[gvar] = _renamed(func, names)
    return tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos)


def _unmarked(text: str, originals: list[str]) -> str:
    return _MARKER.sub(lambda m: originals[int(m.group(1))], text)


def ConvertKeepingNames(target) -> tvm.ir.transform.Pass:  # pylint: disable=invalid-name
    """Stage 1 (:func:`ConvertToPackedLayout`) with the model's tensor names.

    Parameters
    ----------
    target : tvm.target.Target or str
        A texture-capable GPU target.

    Returns
    -------
    tvm.ir.transform.Pass
    """
    convert = ConvertToPackedLayout(target)

    @tvm.transform.module_pass(opt_level=0, name="texscope.ConvertKeepingNames")
    def run(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        marked, originals = mark_names(mod)
        try:
            packed = convert(marked)
        except TexscopeError as err:  # its text names marked variables
            raise TexscopeError(_unmarked(str(err), originals)) from None
        return returned_as_before(restore_names(packed, originals), returned_names(mod))

    return run


def returned_names(mod: tvm.IRModule) -> dict:
    """Per Relax function, the names of the variables it returns (None for
    what is not a variable it computes)."""
    found = {}
    for gvar, func in _relax_functions(mod):
        params = {handle(p) for p in func.params}
        found[gvar.name_hint] = [f.name if isinstance(f, relax.Var) and handle(f) not in params
                                 else None for f in _returned(func)]
    return found


def returned_as_before(mod: tvm.IRModule, names: dict) -> tvm.IRModule:
    """Each function returning variables of the names it returned before
    stage 1, which may have appended to an output (the layout transform back
    from the packed layout): the model's name goes to what is returned, and
    the variable that held it becomes ``<name>_packed`` (``<name>_inner``
    when stage 1 appended something else)."""
    functions = dict(mod.functions)
    for gvar, func in _relax_functions(mod):
        before = names.get(gvar.name_hint)
        fields = _returned(func)
        if before is None or len(before) != len(fields):
            continue
        variables = {v.name: v for v in [*func.params, *(b.var for _, b in
                                                          relax_bindings(mod, [gvar]))]}
        bound = {handle(b.var): b.value for _, b in relax_bindings(mod, [gvar])}
        taken = set(variables)
        renamed = {}
        for field, name in zip(fields, before):
            if name is None or not isinstance(field, relax.Var) or field.name == name:
                continue
            holder = variables.get(name)
            if holder is not None:
                suffix = "packed" if _operation(bound.get(handle(field))) == "layout_transform" \
                    else "inner"
                renamed[handle(holder)] = _unique(f"{name}_{suffix}", taken)
            renamed[handle(field)] = name
        if renamed:
            functions[gvar] = _renamed(func, renamed)
    return tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos)


def _returned(func: relax.Function) -> list:
    """The expressions ``func`` returns, a returned tuple flattened one level
    (through the variable a frontend binds it to)."""
    returned = func.body.body
    bound = {handle(b.var): b.value for block in func.body.blocks for b in block.bindings}
    if isinstance(returned, relax.Var) and isinstance(bound.get(handle(returned)), relax.Tuple):
        returned = bound[handle(returned)]
    return list(returned.fields) if isinstance(returned, relax.Tuple) else [returned]


def name_inputs(mod: tvm.IRModule, names) -> tvm.IRModule:
    """``main`` with its parameters named ``names`` (in order), where a
    frontend made identifiers of them (ONNX's ``input.1`` became
    ``input_1``); a name another variable of ``main`` holds is left."""
    func = mod["main"]
    if len(func.params) != len(names):
        return mod
    variables = [*func.params, *(b.var for block in func.body.blocks for b in block.bindings)]
    taken = {v.name for v in variables}
    renamed = {handle(p): name for p, name in zip(func.params, names)
               if name and p.name != name and name not in taken}
    if not renamed:
        return mod
    functions = dict(mod.functions)
    functions[mod.get_global_var("main")] = _renamed(func, renamed)
    return tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos)


def name_outputs(mod: tvm.IRModule, names) -> tvm.IRModule:
    """``main`` with the variables it returns named as the model names its
    outputs (frontends name them ``gv``, ``lv41``...), so that the plan, the
    replay's ``.npz`` files and the reports use the model's names.

    An output that is not a variable computed by ``main`` (an input passed
    through, a constant), one returned twice, or a name another variable of
    ``main`` holds keeps what it has.

    Parameters
    ----------
    mod : tvm.IRModule
        An imported model.
    names : sequence of str
        The model's output names, in the order ``main`` returns them.
    """
    func = mod["main"]
    fields = _returned(func)
    if len(fields) != len(names):
        return mod
    params = {handle(p) for p in func.params}
    variables = [*func.params, *(b.var for block in func.body.blocks for b in block.bindings)]
    taken = {v.name for v in variables}
    renamed = {}
    for field, name in zip(fields, names):
        key = handle(field) if isinstance(field, relax.Var) else None
        if key is None or key in params or key in renamed or not name:
            continue
        if field.name != name and name in taken:
            continue
        renamed[key] = name
        taken.add(name)
    if not renamed:
        return mod
    functions = dict(mod.functions)
    functions[mod.get_global_var("main")] = _renamed(func, renamed)
    return tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos)
