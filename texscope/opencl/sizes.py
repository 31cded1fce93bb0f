"""Sizes that depend on the input: integer expressions of named size variables.

A model whose input has a symbolic height and width (``R.Tensor((1, 3, "h",
"w"))``) is built once and run at any size.  Its plan (``plan.py``) then
writes what depends on the size as text: a tensor's extent ``"(h - 1) // 2 +
1"``, a kernel's scalar ``"h * w"``, a work size ``"(w + 15) // 16 * 16"``.
The replay binds the variables from the input arrays' shapes and evaluates
the text here: integers, names, ``+ - * // %``, unary minus, parentheses and
the calls ``min``, ``max``, ``truncdiv``, ``truncmod`` (TIR's ``Div`` and
``Mod`` round toward zero, ``//`` and ``%`` toward minus infinity, as TIR's
``FloorDiv`` and ``FloorMod`` do).  Nothing else parses: the text is read by
Python's parser and every node is checked, never handed to ``eval``.

No TVM here: the replay imports this.
"""

from __future__ import annotations

import ast
import functools
import operator
from collections.abc import Mapping

from ..errors import TexscopeError

_BINARY = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
}


def _truncdiv(a: int, b: int) -> int:
    quotient = abs(a) // abs(b)
    return quotient if (a < 0) == (b < 0) else -quotient


def _truncmod(a: int, b: int) -> int:
    return a - _truncdiv(a, b) * b


_CALLS = {"min": min, "max": max, "truncdiv": _truncdiv, "truncmod": _truncmod}
_DIVIDING = (ast.FloorDiv, ast.Mod)


def _check(node: ast.AST, text: str) -> None:
    """Raise unless ``node`` is made of the allowed syntax only."""
    if isinstance(node, ast.Expression):
        _check(node.body, text)
    elif isinstance(node, ast.Constant):
        if type(node.value) is not int:  # bool is an int subclass: refused too
            raise TexscopeError(f"size expression {text!r}: {node.value!r} is not an integer")
    elif isinstance(node, ast.Name):
        pass
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        _check(node.operand, text)
    elif isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        _check(node.left, text)
        _check(node.right, text)
    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
          and node.func.id in _CALLS and len(node.args) == 2 and not node.keywords):
        for arg in node.args:
            _check(arg, text)
    else:
        raise TexscopeError(f"size expression {text!r}: {ast.dump(node)[:60]} is not allowed "
                            "(integers, names, + - * // %, min, max, truncdiv, truncmod)")


@functools.lru_cache(maxsize=4096)
def _parsed(text: str) -> ast.Expression:
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise TexscopeError(f"size expression {text!r} does not parse") from None
    _check(tree, text)
    return tree


def _value(node: ast.AST, values: Mapping[str, int], text: str) -> int:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in values:
            raise TexscopeError(f"size expression {text!r}: the size variable {node.id} is "
                                "not bound")
        return values[node.id]
    if isinstance(node, ast.UnaryOp):
        return -_value(node.operand, values, text)
    if isinstance(node, ast.BinOp):
        left, right = _value(node.left, values, text), _value(node.right, values, text)
        if isinstance(node.op, _DIVIDING) and right == 0:
            raise TexscopeError(f"size expression {text!r} divides by zero")
        return _BINARY[type(node.op)](left, right)
    args = [_value(arg, values, text) for arg in node.args]
    if node.func.id.startswith("trunc") and args[1] == 0:
        raise TexscopeError(f"size expression {text!r} divides by zero")
    return _CALLS[node.func.id](*args)


def is_symbolic(size) -> bool:
    """Whether ``size`` is an expression rather than a number."""
    return isinstance(size, str)


def validate(size, what: str = "size") -> int | str:
    """``size`` as the plan keeps it: an int, or text that parses as allowed.

    Raises
    ------
    TexscopeError
        Neither an integer nor an allowed expression.
    """
    if isinstance(size, str):
        _parsed(size)
        return size
    if not isinstance(size, (bool, float)):
        try:
            return operator.index(size)  # numpy's and TVM's integers too
        except TypeError:
            pass
    raise TexscopeError(f"{what}: {size!r} is neither an integer nor a size expression")


def names(size) -> frozenset[str]:
    """The size variables ``size`` uses (none for a number)."""
    if not is_symbolic(size):
        return frozenset()
    tree = _parsed(size)
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    return frozenset(node.id for node in ast.walk(tree)
                     if isinstance(node, ast.Name) and id(node) not in called)


def evaluate(size, values: Mapping[str, int]) -> int:
    """The value of ``size`` with its variables bound to ``values``.

    Raises
    ------
    TexscopeError
        A variable is not bound, the text does not parse, or it divides by zero.
    """
    if not is_symbolic(size):
        return size
    return _value(_parsed(size).body, values, size)
