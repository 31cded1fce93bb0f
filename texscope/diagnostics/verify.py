"""Checks that keep the planner honest.

:func:`check_invariants` reads an annotated module and lists what is wrong
with it; :func:`equivalent` runs a module before and after annotation on the
CPU and compares the numbers (memory scopes do not change values, so they are
stripped first).
"""

from __future__ import annotations

import math
from pathlib import Path

import attrs
import numpy as np
import tvm
from tvm import relax

from ..convert_layout import ConvertToPackedLayout
from ..rewrites.decompose import DecomposeForCPU
from ..rewrites.legalize import packed_legalizations
from ..rewrites.lift_weights import LiftWeightTransforms
from ..knowledge import registry
from ..errors import TexscopeError
from .numerics import Comparison, compare  # noqa: F401  (verify's API)
from ..ir.graph import (DPS_OPS, Constant, annotated_functions, dps_inputs, relax_bindings,
                        TO_VDEVICE, inputs_and_weights, static_shape, tensor_types)
from ..ir.quiet import quiet_native_stderr
from ..ir.rebuild import Rebuilder, replace_functions, with_vdevice
from ..knowledge.registry import Storage
from ..knowledge.targets import TextureTarget, is_texture_scope, texture_target

MOVES = frozenset({TO_VDEVICE, "relax.hint_on_device"})


@attrs.frozen
class Violation:
    """One broken invariant, located."""

    function: str
    binding: str
    message: str

    def __str__(self) -> str:
        return f"{self.function}/{self.binding}: {self.message}"


def _scope(ty: relax.TensorType) -> str | None:
    return None if ty.vdevice is None else str(ty.vdevice.memory_scope)


class _Checker:
    def __init__(self, mod: tvm.IRModule, texture: TextureTarget):
        self.mod = mod
        self.texture = texture
        self.listed = {v.__chandle__() for v in mod.global_infos.get("vdevice", [])}
        self.violations: list[Violation] = []
        self.function = ""

    def flag(self, binding: str, message: str) -> None:
        self.violations.append(Violation(self.function, binding, message))

    def check_type(self, name: str, ty) -> None:
        for tensor in tensor_types(ty):
            if tensor.vdevice is None:
                self.flag(name, "tensor has no VDevice")
                continue
            if tensor.vdevice.__chandle__() not in self.listed:
                self.flag(name, f"VDevice {_scope(tensor)} is not listed in global_infos")
            scope = _scope(tensor)
            if is_texture_scope(scope):
                fit = self.texture.fit_as(static_shape(tensor), str(tensor.dtype), scope)
                if fit.scope is None:
                    self.flag(name, f"cannot be a texture: {fit.reason}")

    def check_call(self, name: str, call: relax.Call, var_ty) -> None:
        if isinstance(call.op, relax.GlobalVar):
            return
        if call.op.name in MOVES:
            return
        declared = call.ty_args[0] if call.ty_args else None
        if declared is None or any(t.vdevice is None for t in tensor_types(declared)):
            self.flag(name, "call without a VDevice in ty_args")
            return
        written = [_scope(t) for t in tensor_types(declared)]
        if written != [_scope(t) for t in tensor_types(var_ty)]:
            self.flag(name, f"bound as {var_ty} but the call writes {declared}")
        support = registry.support_for(call, self.mod)
        for field, tensor in enumerate(tensor_types(declared)):
            if (why := self.storage_refused(tensor, support.output(field))):
                self.flag(name, f"{support.name} cannot write a {why} (output {field})")
        for operand, arg in enumerate(dps_inputs(call)):
            for tensor in tensor_types(arg.ty):
                if (why := self.storage_refused(tensor, support.input(operand))):
                    self.flag(name, f"{support.name} cannot read a {why} (operand {operand})")
        self.check_sync(name, support, call, written)

    def storage_refused(self, tensor: relax.TensorType, accepted: frozenset) -> str | None:
        """``"texture"`` or ``"buffer"`` where ``tensor`` is stored as a kernel
        does not accept, else None.  A buffer is refused only to a tensor that
        fits a texture: for the others it is every kernel's fallback."""
        if is_texture_scope(_scope(tensor)):
            return None if Storage.TEXTURE in accepted else "texture"
        if Storage.BUFFER in accepted:
            return None
        fit = self.texture.fit(static_shape(tensor), str(tensor.dtype))
        return None if fit.scope is None else "buffer"

    def check_sync(self, name: str, support, call: relax.Call, written: list) -> None:
        """The entry's sync rules: which of the kernel's tensors share a storage."""
        sync = support.sync_rules()
        inputs = [is_texture_scope(_scope(arg.ty)) if isinstance(arg.ty, relax.TensorType)
                  else None for arg in dps_inputs(call)]
        outputs = [is_texture_scope(scope) for scope in written]
        if "inputs" in sync and len({i for i in inputs if i is not None}) > 1:
            self.flag(name, f"{support.name} must read all its inputs in one storage")
        if "outputs" in sync and len(set(outputs)) > 1:
            self.flag(name, f"{support.name} must write all its outputs in one storage")
        if "primary" in sync and inputs and inputs[0] is not None and outputs \
                and inputs[0] != outputs[0]:
            self.flag(name, f"{support.name} must write its first output in the storage "
                      "it reads its first input in")

    def run(self) -> list[Violation]:
        for gvar in annotated_functions(self.mod):
            self.function = gvar.name_hint
            func = self.mod[gvar]
            for param in func.params:
                self.check_type(param.name, param.ty)
            for _, binding in relax_bindings(self.mod, [gvar]):
                name = binding.var.name
                self.check_type(name, binding.var.ty)
                if isinstance(binding.value, relax.Call):
                    self.check_call(name, binding.value, binding.var.ty)
            if any(is_texture_scope(_scope(t)) for t in tensor_types(func.body.body.ty)):
                self.flag("return", "returns a texture; a function returns buffers")
        return self.violations


def check_invariants(mod: tvm.IRModule, target) -> list[Violation]:
    """What is wrong with a module annotated for ``target``; empty when nothing.

    Checked for every annotated function: every tensor (parameter, binding,
    tuple field) has a VDevice listed in ``global_infos["vdevice"]``; every
    texture is 5-D with inner axis 4, static, and within the limits of its
    flavour; every call has ``ty_args`` with a VDevice, and its result is
    bound with the scopes it writes; no kernel reads or writes a storage the
    registry says it cannot (a buffer is refused only to a tensor that fits a
    texture), or breaks its entry's sync rules; the function returns
    buffers.  A tensor read in another scope than written
    goes through ``to_vdevice``, which the IR's own typing enforces.
    """
    return _Checker(mod, texture_target(target)).run()


def _strip_type(ty):
    if isinstance(ty, relax.TensorType):
        return with_vdevice(ty, None)
    if isinstance(ty, relax.TupleType):
        return relax.TupleType([_strip_type(f) for f in ty.fields])
    return ty


def strip_scopes(mod: tvm.IRModule) -> tvm.IRModule:
    """The module with every VDevice and copy between scopes removed."""
    functions = {}
    for gvar in annotated_functions(mod):
        func = mod[gvar]
        rebuilder = Rebuilder(mod)
        params = []
        for param in func.params:
            new = relax.Var(param.name, _strip_type(param.ty))
            rebuilder.var_map[param] = new
            params.append(new)

        def leaf(expr, rebuilder=rebuilder):
            if isinstance(expr, Constant):
                return Constant(expr.value, _strip_type(expr.ty))
            if isinstance(expr, relax.Tuple):
                return relax.Tuple([leaf(f) for f in expr.fields])
            return rebuilder.substitute(expr)

        def rewrite(binding, leaf=leaf):
            value = binding.value
            if not isinstance(value, relax.Call):
                return leaf(value)
            if isinstance(value.op, tvm.ir.Op) and value.op.name in MOVES:
                return leaf(value.args[0])
            args = [leaf(a) for a in value.args]
            ty_args = [_strip_type(t) for t in value.ty_args]
            if isinstance(value.op, tvm.ir.Op) and value.op.name not in DPS_OPS:
                ty_args = []  # the operator infers its own type again
            return relax.Call(value.op, args, value.attrs, ty_args)

        functions[gvar] = rebuilder.run(func, params, rewrite)
    stripped = replace_functions(mod, functions)
    infos = {k: v for k, v in stripped.global_infos.items() if k != "vdevice"}
    return tvm.IRModule(stripped.functions, attrs=None, global_infos=infos)


def _run_on_cpu(mod: tvm.IRModule, inputs: list, function: str = "main") -> list[np.ndarray]:
    """``function`` of ``mod`` compiled for ``llvm`` and run on ``inputs``
    (arrays, or tuples of them for a tuple parameter); its outputs, flat."""
    with tvm.target.Target("llvm"):
        # The default legalization leaves packed convs to texscope's compute,
        # which is target-independent.
        mod = relax.transform.LegalizeOps()(mod)
        mod = relax.transform.LegalizeOps(packed_legalizations())(mod)
    executable = tvm.compile(mod, target="llvm")
    vm = relax.VirtualMachine(executable, tvm.cpu())
    result = vm[function](*[_on_cpu(a) for a in inputs])
    return [r.numpy() for r in _flatten(result)]


def _on_cpu(value):
    if isinstance(value, (list, tuple)):
        return tuple(_on_cpu(item) for item in value)
    return tvm.runtime.tensor(value)


def _flatten(value):
    if isinstance(value, (list, tuple, tvm_ffi_array)):
        for item in value:
            yield from _flatten(item)
    else:
        yield value


tvm_ffi_array = type(tvm.runtime.convert([1]))


def parameter_roles(mod: tvm.IRModule) -> dict[relax.Var, tuple[str, str]]:
    """Per parameter of ``main`` read directly by an operator listed in
    :data:`texscope.knowledge.registry.OPERAND_ROLES`, its role and that
    operator."""
    roles = {}
    params = set(mod["main"].params)
    for _, binding in relax_bindings(mod, [mod.get_global_var("main")]):
        call = binding.value
        if not isinstance(call, relax.Call) or not isinstance(call.op, tvm.ir.Op):
            continue
        for operand, arg in enumerate(call.args):
            role = registry.OPERAND_ROLES.get((call.op.name, operand))
            if role is not None and arg in params:
                roles.setdefault(arg, (role, call.op.name))
    return roles


def _extent(dim, sizes: dict[str, int], name: str) -> int:
    if isinstance(dim, tvm.tirx.IntImm):
        return int(dim.value)
    if isinstance(dim, tvm.ir.Var) and str(dim.name) in sizes:
        return int(sizes[str(dim.name)])
    raise TexscopeError(f"the extent {dim} of {name} is symbolic: give its size variables "
                        f"as sizes={{...}}", "main", name)


def random_inputs(mod: tvm.IRModule, seed: int = 0,
                  sizes: dict[str, int] | None = None) -> list[np.ndarray]:
    """Random arrays for main's parameters, valid for their operators.

    Weights are uniform with variance 1 / fan-in; batch-norm and layer-norm
    scales uniform in [0.75, 1.25], shifts and means in [-0.25, 0.25],
    variances in [0.5, 1.5]; everything else uniform in [-1, 1].  A symbolic
    extent that is a size variable (``"h"``) takes its value from ``sizes``.
    """
    rng = np.random.default_rng(seed)
    roles = parameter_roles(mod)
    arrays = []
    for param in mod["main"].params:
        shape = [_extent(d, sizes or {}, param.name) for d in param.ty.shape.values]
        role, op = roles.get(param, ("data", ""))
        if role == "weight":
            high = math.sqrt(3.0 / max(registry.fan_in(op, shape), 1))
            low = -high
        else:
            low, high = {"scale": (0.75, 1.25), "shift": (-0.25, 0.25),
                         "variance": (0.5, 1.5), "data": (-1.0, 1.0)}[role]
        arrays.append(rng.uniform(low, high, shape).astype(str(param.ty.dtype)))
    return arrays


def equivalent(before: tvm.IRModule, after: tvm.IRModule, inputs=None,
               rtol: float = 1e-4, atol: float = 1e-4) -> Comparison:
    """Run ``before`` and ``after`` (scopes stripped) on the CPU and compare.

    Parameters
    ----------
    before, after : IRModule
        The module before the texture pipeline and after it.
    inputs : list of numpy arrays, optional
        Inputs to main; random ones by default.
    rtol, atol : float
        Tolerances, as in ``numpy.allclose``.
    """
    inputs = random_inputs(before) if inputs is None else inputs
    return compare(_run_on_cpu(strip_scopes(after), inputs), reference_outputs(before, inputs),
                   rtol, atol)


def reference_outputs(mod: tvm.IRModule, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """``mod`` (before any texscope pass) compiled for ``llvm`` and run on ``inputs``."""
    # Stage 1 compiles for inference, as TVM's own pipeline does: batch norm
    # uses its moving statistics, so the reference must too.
    # Operators TVM's CPU build cannot take go through the build's own
    # decompositions (an ewise_fma, an OIHW transpose); the rest stay as given.
    return _run_on_cpu(DecomposeForCPU()(relax.transform.DecomposeOpsForInference()(mod)), inputs)


def tflite_outputs(path, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """What TFLite's own interpreter computes from ``inputs`` for the
    ``.tflite`` file ``path``: the reference an import of it is checked
    against (needs ``ai-edge-litert``).  A TexscopeError where the
    interpreter cannot run the model (a custom operator it has no kernel for)."""
    try:
        from ai_edge_litert.interpreter import Interpreter  # pylint: disable=import-outside-toplevel
    except ImportError as err:
        raise TexscopeError("comparing with TFLite needs its interpreter: "
                            "pip install ai-edge-litert") from err
    # TFLite's C++ announces its CPU delegate on stderr at every model.
    with quiet_native_stderr(noise=("Created TensorFlow Lite XNNPACK delegate",)):
        interpreter = Interpreter(model_path=str(path))
        try:
            interpreter.allocate_tensors()
        except RuntimeError as err:  # e.g. MediaPipe's custom operators: no kernel for them
            raise TexscopeError(f"TFLite's interpreter cannot run {Path(path).name}: "
                                f"{str(err).splitlines()[0]}") from None
    for detail, value in zip(interpreter.get_input_details(), inputs):
        interpreter.set_tensor(detail["index"], np.asarray(value))
    interpreter.invoke()
    return [interpreter.get_tensor(detail["index"])
            for detail in interpreter.get_output_details()]


def lifted_inputs(mod: tvm.IRModule, inputs: list[np.ndarray], target) -> list[np.ndarray]:
    """What ``main`` of ``texscope.build(mod, target, lift_weights=True)``
    takes for ``inputs`` of ``mod``'s ``main``: its inputs, then what
    ``main_transform_params`` makes of its weights, computed on the CPU (from
    stage 1 for ``target``, lifted, compiled for ``llvm``; the build's own
    stage 1 but for the names it gives temporaries)."""
    texture = texture_target(target)
    with texture.target:
        lifted = LiftWeightTransforms(ConvertToPackedLayout(texture.target)(mod))
    transform = relax.transform.DeadCodeElimination(["main_transform_params"])(tvm.IRModule(
        {gvar: func for gvar, func in lifted.functions.items() if gvar.name_hint != "main"}))
    count = len(inputs_and_weights(mod["main"])[0])
    return [*inputs[:count], *_run_on_cpu(transform, [inputs[count:]], "main_transform_params")]
