"""TIR integer expressions as the plan's size text (``sizes.py`` reads it back).

The plan is made where TVM is; its symbolic sizes are TIR expressions of
the Relax ``main``'s size variables.  They are written here as the text the
TVM-free replay evaluates, and refused (a named error) where they use
anything else, a ``Select`` say.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx
from tvm.sym import Analyzer

from ..errors import TexscopeError

# Python's precedence, which the replay's parser applies.
_ADDITIVE, _MULTIPLICATIVE, _ATOM = 1, 2, 3
_INFIX = {
    tirx.Add: ("+", _ADDITIVE),
    tirx.Sub: ("-", _ADDITIVE),
    tirx.Mul: ("*", _MULTIPLICATIVE),
    tirx.FloorDiv: ("//", _MULTIPLICATIVE),
    tirx.FloorMod: ("%", _MULTIPLICATIVE),
}
_CALLED = {tirx.Min: "min", tirx.Max: "max", tirx.Div: "truncdiv", tirx.Mod: "truncmod"}


def integer_typed(expr) -> bool:
    """Whether a TIR expression has an integer type."""
    ty = getattr(expr, "ty", None)
    return isinstance(ty, tvm.ir.PrimType) and str(ty.dtype).startswith(("int", "uint"))


def _text(expr) -> tuple[str, int]:
    """(text, precedence) of ``expr``."""
    if isinstance(expr, tirx.IntImm):
        value = int(expr.value)
        return (str(value), _ATOM) if value >= 0 else (f"({value})", _ATOM)
    if isinstance(expr, tvm.ir.Var) and integer_typed(expr):
        return str(expr.name), _ATOM
    if isinstance(expr, tirx.Cast) and integer_typed(expr):
        # Sizes fit in 32 bits wherever TVM narrows them; Python ints are exact.
        return _text(expr.value)
    if type(expr) in _INFIX:
        symbol, precedence = _INFIX[type(expr)]
        left, left_precedence = _text(expr.a)
        right, right_precedence = _text(expr.b)
        if left_precedence < precedence:
            left = f"({left})"
        # Left-associative: a right operand of equal precedence needs its parentheses.
        if right_precedence <= precedence:
            right = f"({right})"
        return f"{left} {symbol} {right}", precedence
    if type(expr) in _CALLED:
        return f"{_CALLED[type(expr)]}({size_text(expr.a)}, {size_text(expr.b)})", _ATOM
    raise TexscopeError(f"the OpenCL plan cannot write the size {expr} "
                        f"({type(expr).__name__}): integers, + - * // % min max only")


def size_text(expr) -> int | str:
    """``expr`` as the plan writes a size: an int where it is constant, else text."""
    if isinstance(expr, int):
        return expr
    if isinstance(expr, tirx.IntImm):
        return int(expr.value)
    return _text(expr)[0]


def substituted(expr, values: dict, analyzer: Analyzer | None = None):
    """``expr`` with variables replaced by ``values`` (a Var to a PrimExpr), simplified."""
    if isinstance(expr, int):
        return expr
    if values:
        expr = tvm_ffi.structural_map(expr, (tvm.ir.Var, lambda var: values.get(var, var)))
    return (analyzer or Analyzer()).simplify(expr)


def free_names(expr) -> set[str]:
    """Names of the variables ``expr`` uses."""
    found = set()

    def visit(node, visitor):
        if isinstance(node, tvm.ir.Var):
            found.add(str(node.name))
        visitor.default_visit(node)

    if not isinstance(expr, int):
        tvm_ffi.structural_visit(expr, visit)
    return found
