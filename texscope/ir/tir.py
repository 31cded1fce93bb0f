"""Small questions asked of TIR: its blocks and if statements, a buffer's memory scope."""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import s_tir, tirx


# No statement lies inside an expression or a store: the walks below stop
# there, a fraction of a millisecond on a scheduled conv.
_NO_STATEMENT_BELOW = (tvm.ir.Expr, tirx.BufferStore, tirx.Evaluate)


def _pruned(_value, _visitor):
    return None


def blocks_in(stmt, nested: bool = True) -> list:
    """Every block in ``stmt``, outermost first (with ``nested`` false, the
    outermost only: none inside another)."""
    found = []

    def on_block(block, visitor):
        found.append(block)
        return visitor.visit(block.body) if nested else None

    tvm_ffi.structural_visit(stmt, [(s_tir.stmt.SBlock, on_block), (_NO_STATEMENT_BELOW, _pruned)])
    return found


def allocated_scopes(stmt) -> set[str]:
    """The memory scopes of the buffers ``stmt`` allocates: in its blocks
    (scheduled TIR) or by allocation statements (once blocks are lowered)."""
    scopes = set()

    def on_block(block, visitor):
        scopes.update(buffer.scope() for buffer in block.alloc_buffers)
        return visitor.visit(block.body)

    def on_allocation(allocation, _visitor):
        scopes.add(allocation.buffer.scope())

    tvm_ffi.structural_visit(stmt, [(s_tir.stmt.SBlock, on_block), (tirx.AllocBuffer, on_allocation),
                                    (_NO_STATEMENT_BELOW, _pruned)])
    return scopes


def has_if_statement(stmt) -> bool:
    """Whether ``stmt`` holds an ``if`` statement (``if_then_else``
    expressions do not count)."""
    found = []

    def on_if(_node, _visitor):
        found.append(True)

    tvm_ffi.structural_visit(stmt, [(tirx.IfThenElse, on_if), (_NO_STATEMENT_BELOW, _pruned)])
    return bool(found)


def scope_of(buffer) -> str:
    """The memory scope of a buffer (a parameter whose type is a BufferType);
    "" for anything else."""
    ty = getattr(buffer, "ty", None)
    return str(ty.storage_scope) if isinstance(ty, tirx.BufferType) else ""
