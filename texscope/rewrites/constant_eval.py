"""What each Relax operator computes, in numpy, for constant folding.

:data:`EVALUATORS` maps an operator name to a function of the call and the
numpy values of its constant arguments (in order; shape arguments are not
among them) that returns the result, or None where this evaluator cannot
promise the bits TVM's LLVM build of the operator's legalization would give
(that call is then built, see :mod:`texscope.rewrites.fold_constants`).  Only what is
exact is here: data movement, casts between floats or from integers, and
IEEE arithmetic whose operands already have the result's type (numpy and
LLVM both round each operation once, to nearest even).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import tvm_ffi
from tvm import relax, tirx

from ..ir.graph import static_shape


def _static_shape(call: relax.Call) -> tuple[int, ...] | None:
    return static_shape(call.ty)


def _reshaped(call: relax.Call, values: list[np.ndarray]) -> np.ndarray | None:
    shape = _static_shape(call)
    return None if shape is None else values[0].reshape(shape)


def _astype(call: relax.Call, values: list[np.ndarray]) -> np.ndarray | None:
    source, target = values[0].dtype, np.dtype(str(call.attrs.dtype))
    # Float-to-integer casts of NaN or out-of-range values are undefined in
    # LLVM; everything else rounds (to nearest even) or wraps alike.
    if target.kind == "f" and source.kind in "fiu" or target.kind in "iu" and source.kind in "iu":
        with np.errstate(over="ignore"):  # overflow gives infinities, as in LLVM
            return values[0].astype(target)
    return None


def _permute_dims(call: relax.Call, values: list[np.ndarray]) -> np.ndarray:
    axes = call.attrs.axes
    return np.transpose(values[0], None if axes is None else [int(a) for a in axes])


_INDEX_OPS: dict[type, Callable] = {
    tirx.Add: lambda a, b: a + b,
    tirx.Sub: lambda a, b: a - b,
    tirx.Mul: lambda a, b: a * b,
    tirx.FloorDiv: lambda a, b: a // b,
    tirx.FloorMod: lambda a, b: a % b,
}


def _index_values(expr, env: dict) -> np.ndarray | int | None:
    """An index expression over numpy index grids, None for an unknown node."""
    if isinstance(expr, tirx.IntImm):
        return int(expr.value)
    if isinstance(expr, tirx.Var):
        return env.get(expr)
    combine = _INDEX_OPS.get(type(expr))
    if combine is None:
        return None
    a, b = _index_values(expr.a, env), _index_values(expr.b, env)
    return None if a is None or b is None else combine(a, b)


@functools.lru_cache(maxsize=256)
def _scatter_targets(index_map_key: tvm_ffi.StructuralKey, shape: tuple[int, ...]):
    """Where each element of a tensor of ``shape`` goes (broadcastable index
    arrays), None where the map has a node numpy cannot evaluate.  Walking the
    map costs most of a fold and packing repeats few maps: kept per map."""
    index_map = index_map_key.key
    grids = np.indices(shape, dtype=np.int64, sparse=True)
    env = dict(zip(index_map.initial_indices, grids))
    targets = [_index_values(e, env) for e in index_map.final_indices]
    if any(t is None for t in targets):
        return None
    return tuple(np.broadcast_to(t, shape) for t in targets)


def _layout_transform(call: relax.Call, values: list[np.ndarray]) -> np.ndarray | None:
    """Scatter every element to the index its map gives; padding gets the pad value."""
    data, shape = values[0], _static_shape(call)
    index_map = call.attrs.index_map
    if shape is None or len(index_map.initial_indices) != data.ndim:
        return None
    targets = _scatter_targets(tvm_ffi.StructuralKey(index_map), data.shape)
    if targets is None:
        return None
    pad = call.attrs.pad_value
    out = np.full(shape, 0 if pad is None else pad.value, dtype=data.dtype)
    out[targets] = data
    return out


def _pad(call: relax.Call, values: list[np.ndarray]) -> np.ndarray | None:
    widths = [int(w) for w in call.attrs.pad_width]
    if str(call.attrs.pad_mode) != "constant" or min(widths, default=0) < 0:
        return None
    data = values[0]
    fill = np.array(float(call.attrs.pad_value)).astype(data.dtype)
    return np.pad(data, list(zip(widths[::2], widths[1::2])), constant_values=fill)


def _same_type_arithmetic(fn: Callable, kinds: str) -> Callable:
    """An element-wise operator, folded when every operand has the result's type."""

    def evaluate(call: relax.Call, values: list[np.ndarray]) -> np.ndarray | None:
        dtype = np.dtype(str(call.ty.dtype))
        if dtype.kind not in kinds or any(v.dtype != dtype for v in values):
            return None
        with np.errstate(all="ignore"):
            return np.asarray(fn(*values), dtype=dtype)

    return evaluate


EVALUATORS: dict[str, Callable[[relax.Call, list[np.ndarray]], np.ndarray | None]] = {
    "relax.astype": _astype,
    "relax.permute_dims": _permute_dims,
    "relax.reshape": _reshaped,
    "relax.expand_dims": _reshaped,
    "relax.squeeze": _reshaped,
    "relax.flatten": _reshaped,
    "relax.layout_transform": _layout_transform,
    "relax.nn.pad": _pad,
    "relax.add": _same_type_arithmetic(np.add, "fiu"),
    "relax.subtract": _same_type_arithmetic(np.subtract, "fiu"),
    "relax.multiply": _same_type_arithmetic(np.multiply, "fiu"),
    # Integer division rounds differently in TVM (floor) and C (truncation).
    "relax.divide": _same_type_arithmetic(np.divide, "f"),
    "relax.negative": _same_type_arithmetic(np.negative, "fi"),
    "relax.sqrt": _same_type_arithmetic(np.sqrt, "f"),
}


def evaluate(call: relax.Call, values: list[np.ndarray]) -> np.ndarray | None:
    """``call``'s result from its constant arguments' values, None where unknown.

    The result always has the call's static shape and element type.
    """
    evaluator = EVALUATORS.get(call.op.name)
    try:
        result = None if evaluator is None else evaluator(call, values)
    except TypeError:  # a type numpy lacks (bfloat16, float8...)
        return None
    if result is None:
        return None
    shape = _static_shape(call)
    if shape != result.shape or str(result.dtype) != str(call.ty.dtype):
        return None
    return np.asarray(result, order="C")  # ascontiguousarray makes a scalar 1-D

