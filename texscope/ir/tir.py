"""Small questions asked of TIR: its blocks, a buffer's memory scope."""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import s_tir, tirx


def blocks_in(stmt, nested: bool = True) -> list:
    """Every block in ``stmt``, outermost first (with ``nested`` false, the
    outermost only: none inside another).  Statements only are walked: no
    block lies inside an expression or a store, and skipping them makes the
    walk a fraction of a millisecond on a scheduled conv."""
    found = []

    def on_block(block, visitor):
        found.append(block)
        return visitor.visit(block.body) if nested else None

    def pruned(_value, _visitor):
        return None

    tvm_ffi.structural_visit(stmt, [
        (s_tir.stmt.SBlock, on_block),
        ((tvm.ir.Expr, tirx.BufferStore, tirx.Evaluate), pruned),
    ])
    return found


def scope_of(buffer) -> str:
    """The memory scope of a buffer (a parameter whose type is a BufferType);
    "" for anything else."""
    ty = getattr(buffer, "ty", None)
    return str(ty.storage_scope) if isinstance(ty, tirx.BufferType) else ""
