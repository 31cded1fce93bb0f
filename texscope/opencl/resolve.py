"""A plan of symbolic size made concrete for the arrays it is given.

A model built for any input size (``R.Tensor((1, 3, "h", "w"))``) has one
plan whose shapes, kernel scalars, workspaces and work sizes are size
expressions (``plan.py``, ``sizes.py``).  Before a run, :func:`bind_sizes`
reads each size variable off the input arrays' shapes (where an input's
extent is that variable alone) and checks every other extent of the inputs
against its expression; :func:`resolved` then evaluates everything, giving the
static plan that ``replay`` runs.  No TVM here.
"""

from __future__ import annotations

import attrs
import numpy as np

from ..errors import TexscopeError
from . import sizes as size_exprs
from .plan import KernelStep, Plan, ScalarArg, WorkspaceArg


def _shape_text(shape) -> str:
    return "(" + ", ".join(str(extent) for extent in shape) + ")"


def _bound_text(values: dict[str, int]) -> str:
    return ", ".join(f"{name}={value}" for name, value in values.items())


def bind_sizes(plan: Plan, arrays) -> dict[str, int]:
    """The value of each of the plan's size variables, from the input arrays.

    Parameters
    ----------
    plan : Plan
    arrays : sequence of numpy arrays
        One per input of ``plan``, in order.

    Returns
    -------
    dict
        Size variable name to its value, in the order of ``plan.sizes``.

    Raises
    ------
    TexscopeError
        An array of another rank, two inputs that give one variable two
        values, an extent that differs from what its expression gives, or a
        variable that no input's shape binds.
    """
    if len(arrays) != len(plan.inputs):
        raise TexscopeError(f"main takes {len(plan.inputs)} inputs, got {len(arrays)}")
    found: dict[str, tuple[int, str]] = {}
    for name, array in zip(plan.inputs, arrays):
        declared, actual = plan.spec(name).shape, np.shape(array)
        if len(declared) != len(actual):
            raise TexscopeError(f"input {name} has shape {_shape_text(declared)}, "
                                f"{len(declared)}-D; got a {len(actual)}-D array of shape "
                                f"{list(actual)}", "main", name)
        for extent, size in zip(declared, actual):
            if extent not in plan.sizes:
                continue
            if extent in found and found[extent][0] != size:
                raise TexscopeError(
                    f"input {name} gives {extent}={size} (shape {list(actual)}) but input "
                    f"{found[extent][1]} gave {extent}={found[extent][0]}", "main", name)
            found[extent] = (int(size), name)
    unbound = [variable for variable in plan.sizes if variable not in found]
    if unbound:
        raise TexscopeError(f"the size variable {', '.join(unbound)} is not the extent of any "
                            "input's axis, so no input binds it", "main")
    values = {variable: found[variable][0] for variable in plan.sizes}
    for name, array in zip(plan.inputs, arrays):
        declared = plan.spec(name).shape
        expected = [size_exprs.evaluate(extent, values) for extent in declared]
        if expected != list(np.shape(array)):
            raise TexscopeError(
                f"input {name} has shape {_shape_text(declared)}, which is {expected} for "
                f"{_bound_text(values)}; got an array of shape {list(np.shape(array))}",
                "main", name)
    return values


def _step(step, evaluate):
    if not isinstance(step, KernelStep):
        return step
    args = []
    for arg in step.args:
        if isinstance(arg, ScalarArg) and size_exprs.is_symbolic(arg.value):
            arg = attrs.evolve(arg, value=evaluate(arg.value))
        elif isinstance(arg, WorkspaceArg):
            arg = attrs.evolve(arg, nbytes=evaluate(arg.nbytes))
        args.append(arg)
    global_size = tuple(evaluate(size) for size in step.global_size)
    local_size = tuple(evaluate(size) for size in step.local_size)
    if min(global_size) <= 0 or min(local_size) <= 0:
        raise TexscopeError(f"kernel {step.kernel} would run {list(global_size)} work items in "
                            f"groups of {list(local_size)}: the input is too small for it",
                            "main", step.binding)
    return attrs.evolve(step, args=args, global_size=global_size, local_size=local_size)


def resolved(plan: Plan, values: dict[str, int]) -> Plan:
    """``plan`` with every size expression evaluated for ``values``: a static plan.

    Raises
    ------
    TexscopeError
        A tensor would have a negative extent or a kernel no work item (an
        input smaller than the model's kernels), or an expression uses an
        unbound variable.
    """
    if not plan.sizes:
        return plan

    def evaluate(size):
        return size_exprs.evaluate(size, values)

    tensors = {}
    for name, spec in plan.tensors.items():
        shape = tuple(evaluate(extent) for extent in spec.shape)
        if min(shape, default=0) < 0:
            raise TexscopeError(f"tensor {name} would have shape {list(shape)} for "
                                f"{_bound_text(values)}: the input is too small", "main", name)
        tensors[name] = attrs.evolve(spec, shape=shape)
    steps = tuple(_step(step, evaluate) for step in plan.steps)
    return attrs.evolve(plan, tensors=tensors, steps=steps, sizes=())
