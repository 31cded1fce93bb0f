"""Shapes for the inputs a model leaves open.

A TVMScript parameter may give its rank but no shape
(``R.Tensor(dtype="float32", ndim=4)``), and exporters write such inputs;
texscope plans storage from shapes, so the user names them
(``--input-shape x=1,16,28,28``) and every binding's type is inferred again.
"""

from __future__ import annotations

import tvm
from tvm import relax

from ..errors import TexscopeError
from ..ir.rebuild import Rebuilder, replace_functions


def unshaped_inputs(mod: tvm.IRModule) -> list[str]:
    """Main's tensor parameters with no shape, by name."""
    return [p.name for p in mod["main"].params
            if isinstance(p.ty, relax.TensorType) and p.ty.shape is None]


def parse_input_shape(item: str) -> tuple[str, list[int]]:
    """``NAME=D0,D1,...`` as a name and its extents."""
    name, _, dims = item.partition("=")
    extents = dims.split(",")
    if not name or not all(e.strip().isdigit() and int(e) > 0 for e in extents):
        raise TexscopeError(f"--input-shape {item}: expected NAME=D0,D1,... with each extent "
                            "a positive integer, e.g. x=1,16,28,28")
    return name, [int(e) for e in extents]


def require_input_shapes(mod: tvm.IRModule, given: dict[str, list[int]]) -> None:
    """Raise, in one line, unless every unshaped input of main has a shape in
    ``given`` and every shape given names such an input of its rank."""
    params = {p.name: p for p in mod["main"].params}
    missing = [name for name in unshaped_inputs(mod) if name not in given]
    if missing:
        ty = params[missing[0]].ty
        raise TexscopeError(
            f"main's input {missing[0]!r} has a rank ({ty.ndim}) but no shape; give it with "
            f"--input-shape {missing[0]}={','.join(f'D{i}' for i in range(max(int(ty.ndim), 1)))}" + (f"; and {', '.join(missing[1:])}" if missing[1:] else ""))
    for name, dims in given.items():
        param = params.get(name)
        if param is None or name not in unshaped_inputs(mod):
            open_inputs = ", ".join(unshaped_inputs(mod)) or "none"
            raise TexscopeError(f"--input-shape {name}: main has no input of that name without "
                                f"a shape (inputs without one: {open_inputs})")
        if int(param.ty.ndim) not in (-1, len(dims)):
            raise TexscopeError(f"--input-shape {name}: {len(dims)} extents given, and "
                                f"{name!r} has rank {int(param.ty.ndim)}")


def with_input_shapes(mod: tvm.IRModule, given: dict[str, list[int]]) -> tvm.IRModule:
    """A new module whose main takes the shapes ``given`` (by parameter name)
    for its unshaped inputs, every binding's type inferred again.

    Raises
    ------
    TexscopeError
        As :func:`require_input_shapes`.
    """
    require_input_shapes(mod, given)
    if not given:
        return mod
    func = mod["main"]
    rebuilder = Rebuilder(mod)
    params = []
    for param in func.params:
        if param.name in given:
            new = relax.Var(param.name, relax.TensorType(given[param.name], param.ty.dtype))
            rebuilder.var_map[param] = new
            param = new
        params.append(param)

    def rewrite(binding):
        value = binding.value
        if isinstance(value, relax.Call):
            return rebuilder.substitute_call(value)
        return rebuilder.substitute(value)

    rebuilt = rebuilder.run(func, params, rewrite)
    return replace_functions(mod, {mod.get_global_var("main"): rebuilt})
