"""Call sites that carry storage: one PrimFunc per storage signature, and
storage changes that stay kernels.

TVM 0.27's ``SpecializePrimFuncBasedOnCallSite`` writes the memory scopes of
a call site into the PrimFunc it calls, in place.  When one PrimFunc is
called from two sites whose tensors live in different storages (a conv whose
output is a texture at one site and a buffer at the next, common after
identical kernels are merged), both sites end up with one signature and one
of them writes a buffer where the program holds an image.  Running the built
kernels on OpenCL showed it.  Giving each distinct signature its own copy of
the PrimFunc first makes the specialization exact.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import relax, s_tir

from ...ir.graph import CALL_TIR, relax_bindings
from ...ir.rebuild import Rebuilder, replace_functions


def _scopes(ty) -> tuple[str, ...]:
    if isinstance(ty, relax.TupleType):
        return tuple(scope for field in ty.fields[:] for scope in _scopes(field))
    if isinstance(ty, relax.TensorType) and ty.vdevice is not None:
        return (str(ty.vdevice.memory_scope),)
    return ("",)


def _signature(call: relax.Call) -> tuple[str, ...]:
    return (*_scopes(call.args[1].ty), *_scopes(call.ty))


def _is_call_tir(value) -> bool:
    return (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op)
            and value.op.name == CALL_TIR)


def split_prim_funcs_by_signature(mod: tvm.IRModule) -> tvm.IRModule:
    """A module where no PrimFunc is called with two storage signatures.

    The first signature a PrimFunc is called with keeps it; each other one
    gets a copy, tagged with ``texscope.storage_signature``.
    """
    relax_functions = {gv: f for gv, f in mod.functions.items() if isinstance(f, relax.Function)}
    signatures: dict[relax.GlobalVar, list[tuple]] = {}
    for _, binding in relax_bindings(mod):
        if _is_call_tir(binding.value):
            seen = signatures.setdefault(binding.value.args[0], [])
            if _signature(binding.value) not in seen:
                seen.append(_signature(binding.value))
    if all(len(seen) == 1 for seen in signatures.values()):
        return mod
    builder = relax.BlockBuilder(mod)
    callee: dict[tuple, relax.GlobalVar] = {}
    for gvar, seen in signatures.items():
        callee[gvar, seen[0]] = gvar
        for signature in seen[1:]:
            # Fresh variables: two PrimFuncs must not share definitions.
            copy = s_tir.renew_defs(mod[gvar]).with_attr(
                "texscope.storage_signature", ",".join(signature))
            if copy.attrs is not None and "global_symbol" in copy.attrs:
                copy = copy.without_attr("global_symbol")
            callee[gvar, signature] = builder.add_func(copy, gvar.name_hint)
    extended = builder.get()
    rewritten = {}
    for gvar, func in relax_functions.items():
        rebuilder = Rebuilder(extended)

        def rewrite(binding, rebuilder=rebuilder):
            value = binding.value
            if not isinstance(value, relax.Call):
                return rebuilder.substitute(value)
            if _is_call_tir(value):
                return rebuilder.substitute_call(value, callee[value.args[0], _signature(value)])
            return rebuilder.substitute_call(value)

        rewritten[gvar] = rebuilder.run(func, list(func.params), rewrite)
    return replace_functions(extended, rewritten)


def _changes_storage(binding) -> bool:
    value = binding.value
    return _is_call_tir(value) and len(set(_signature(value))) > 1


def keep_storage_changes_as_kernels(mod: tvm.IRModule) -> tvm.IRModule:
    """Bind every ``call_tir`` whose tensors are not all in one storage to a
    dataflow output variable.

    ``RewriteDataflowReshape`` turns a call of a reshape-like PrimFunc into a
    view of its input, and it only looks at dataflow variables.  A kernel that
    packs a buffer into an image (a layout transform that moves no element
    within the buffer) is reshape-like, but the image is new memory: as a view
    the image would alias the buffer, and VM code generation then fails.

    Only those variables change, to a ``Var`` of the same name and type
    wherever they occur; the rest of the function is kept as it is (a
    rebuild of every binding took 10.5 ms on chain64, this 6.1).
    """
    rewritten = {}
    for gvar, func in mod.functions.items():
        if not isinstance(func, relax.Function):
            continue
        outputs = {binding.var: relax.Var(binding.var.name, binding.var.ty)
                   for _, binding in relax_bindings(mod, [gvar])
                   if isinstance(binding.var, relax.DataflowVar) and _changes_storage(binding)}
        if outputs:
            rewritten[gvar] = tvm_ffi.structural_map(
                func, (relax.DataflowVar, lambda var, outputs=outputs: outputs.get(var, var)))
    return replace_functions(mod, rewritten) if rewritten else mod


@tvm.transform.module_pass(opt_level=0, name="texscope.SplitPrimFuncsBySignature")
def SplitPrimFuncsBySignature(mod: tvm.IRModule, _ctx) -> tvm.IRModule:  # pylint: disable=invalid-name
    """:func:`split_prim_funcs_by_signature` as a pass."""
    return split_prim_funcs_by_signature(mod)


@tvm.transform.module_pass(opt_level=0, name="texscope.KeepStorageChangesAsKernels")
def KeepStorageChangesAsKernels(mod: tvm.IRModule, _ctx) -> tvm.IRModule:  # pylint: disable=invalid-name
    """:func:`keep_storage_changes_as_kernels` as a pass."""
    return keep_storage_changes_as_kernels(mod)


def buffer_in_scope(param, scope: str):
    """A buffer like the parameter's (its type is a BufferType) in ``scope``."""
    ty = param.ty
    return tvm.tirx.decl_buffer(ty.shape, ty.dtype, param.name, strides=ty.strides,
                                elem_offset=ty.elem_offset, scope=scope,
                                data_alignment=ty.data_alignment,
                                offset_factor=ty.offset_factor)


def specialize_texture_params(mod: tvm.IRModule) -> tvm.IRModule:
    """Give each PrimFunc's parameters the texture scopes its call sites pass.

    TVM's ``SpecializePrimFuncBasedOnCallSite`` rebuilds every parameter's
    buffer from the call site's shape, and ``tirx.Specialize`` then rejects a
    symbolic size that is an expression (a conv's output height ``h + 2 - 3 +
    1``): a model with symbolic spatial sizes could not be built.  Only
    texture parameters need specializing, and a texture's shape is static, so
    each buffer keeps its own shape and gets the scope.  After
    :func:`split_prim_funcs_by_signature` every PrimFunc has one signature.
    """
    specialized: dict[relax.GlobalVar, tvm.tirx.PrimFunc] = {}
    for _, binding in relax_bindings(mod):
        value = binding.value
        if not _is_call_tir(value) or value.args[0] in specialized:
            continue
        gvar = value.args[0]
        func = mod[gvar]
        param_map = {}
        for param, scope in zip(func.params, _signature(value)):
            if scope not in ("", "global") and isinstance(param.ty, tvm.tirx.BufferType):
                param_map[param] = buffer_in_scope(param, scope)
        # As TVM's pass marks every PrimFunc it has specialized.
        specialized[gvar] = (func.specialize(param_map) if param_map else func).with_attr(
            "scoped", 1)
    if not specialized:
        return mod
    functions = dict(mod.functions)
    functions.update(specialized)
    return tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos)


@tvm.transform.module_pass(opt_level=0, name="texscope.SpecializeTextureParams")
def SpecializeTextureParams(mod: tvm.IRModule, _ctx) -> tvm.IRModule:  # pylint: disable=invalid-name
    """:func:`specialize_texture_params` as a pass."""
    return specialize_texture_params(mod)
