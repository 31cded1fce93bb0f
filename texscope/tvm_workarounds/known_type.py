"""Give a Relax expression the type already known for it.

Seen on TVM 0.27: an expression built from its parts (``relax.Call(op,
args)``, ``relax.SeqExpr``) has no tensor type until it is normalized, which
infers the type again (about 5 ms per packed conv2d: layout parsing).  Where
the rewrite knows the type (the old call's, on another VDevice; the old
body's), texscope sets it with TVM's private ``relax.expr._update_type``,
the one way TVM offers.  ``tests/test_tvm_workarounds.py`` fails once TVM
drops that function or types such expressions itself.
"""

from __future__ import annotations

from tvm import relax


def with_known_type(expr: relax.Expr, ty) -> relax.Expr:
    """``expr``, given the type ``ty`` in place; returns ``expr``."""
    relax.expr._update_type(expr, ty)  # pylint: disable=protected-access
    return expr
