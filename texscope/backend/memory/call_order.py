"""Order a dataflow block's calls so that fewer tensors are alive at once.

A texture plan adds kernels the all-buffer program does not have: the
unpacking of packed tensors into the NCHW tensors an operator without a
packed layout reads (TVM 0.27's softmax over channels) or the function
returns.  ConvertLayout puts each such unpack where the tensor is read,
often at the end of the block, so the packed tensor stays alive beside
everything made meanwhile: inception's conv and pool outputs are unpacked
for the return after the softmax, and at the softmax five tensors of 98 KiB
are alive where the all-buffer program has four and a half.

:func:`OrderForMemory` reorders each dataflow block of every Relax function
by list scheduling: of the bindings whose inputs are ready, it takes the one
that adds the fewest bytes (its outputs less the inputs it is the last
reader of), the earliest in the block on a tie.  The new order is kept only
where its peak (every tensor alive from its binding to its last reader, as
texscope's storage planner can attain) is lower than the old one's.
Dataflow bindings are pure, so any order that keeps every binding after
those it reads computes the same values.
"""

from __future__ import annotations


import tvm
from tvm import relax

from ...ir.graph import handle, read_after_block, static_bytes, vars_read


def _makes_memory(value) -> bool:
    """Whether a binding's value is new memory (a call), not a name for
    memory made before (a variable, tuple or field of one)."""
    return isinstance(value, relax.Call)


class _Block:
    """The bindings of one dataflow block as a graph of memory."""

    def __init__(self, bindings, kept: set):
        """``kept``: the handles of the variables read after the block."""
        self.bindings = bindings
        index = {handle(b.var): i for i, b in enumerate(bindings)}
        # roots[i]: the bindings whose memory binding i's variable names.
        self.roots: list[tuple[int, ...]] = []
        self.reads: list[set[int]] = []  # bindings whose results binding i reads
        self.size: list[int] = []
        for i, binding in enumerate(bindings):
            read = {index[key] for key in map(handle, vars_read(binding.value)) if key in index}
            self.reads.append(read)
            if _makes_memory(binding.value):
                self.roots.append((i,))
                self.size.append(static_bytes(binding.var.ty))
            else:
                self.roots.append(tuple(sorted({r for j in read for r in self.roots[j]})))
                self.size.append(0)
        # The memory binding i reads, through any name of it (asked at every
        # step of the scheduling, for every binding ready).
        self.read_roots: list[frozenset[int]] = [
            frozenset(r for j in read for r in self.roots[j]) for read in self.reads]
        # Kept memory is never freed.
        self.readers: list[set[int]] = [set() for _ in bindings]
        self.kept: set[int] = set()
        for i, binding in enumerate(bindings):
            for root in self.read_roots[i]:
                self.readers[root].add(i)
            if handle(binding.var) in kept or not isinstance(binding.var, relax.DataflowVar):
                self.kept.update(self.roots[i])

    def peak(self, order: list[int]) -> int:
        left = [len(r) for r in self.readers]
        live = top = 0
        for i in order:
            live += self.size[i]
            top = max(top, live)
            live -= self._freed(i, left)
        return top

    def _freed(self, i: int, left: list[int]) -> int:
        freed = 0
        for root in self.read_roots[i]:
            left[root] -= 1
            if not left[root] and root not in self.kept:
                freed += self.size[root]
        if not self.readers[i] and i not in self.kept and self.roots[i] == (i,):
            freed += self.size[i]  # made and never read
        return freed

    def _gain(self, i: int, left: list[int]) -> int:
        freed = sum(self.size[r] for r in self.read_roots[i]
                    if left[r] == 1 and r not in self.kept)
        return self.size[i] - freed

    def scheduled(self) -> list[int]:
        count = len(self.bindings)
        waiting = [len(r) for r in self.reads]
        users: list[list[int]] = [[] for _ in range(count)]
        for i, read in enumerate(self.reads):
            for j in read:
                users[j].append(i)
        left = [len(r) for r in self.readers]
        ready = {i for i in range(count) if not waiting[i]}
        order = []
        while ready:
            best = min(ready, key=lambda i: (self._gain(i, left), i))
            ready.remove(best)
            order.append(best)
            self._freed(best, left)
            for user in users[best]:
                waiting[user] -= 1
                if not waiting[user]:
                    ready.add(user)
        return order


def reordered_block(block: relax.DataflowBlock, kept: set) -> relax.DataflowBlock:
    """``block`` in the order of least peak (itself where none is lower, and
    where a ``match_cast`` defines size variables: later bindings read them
    through their types, which the order does not follow).  ``kept``: the
    handles of the variables read after it."""
    if any(isinstance(b, relax.MatchCast) for b in block.bindings):
        return block
    graph = _Block(list(block.bindings), kept)
    order = graph.scheduled()
    if order == sorted(order) or graph.peak(order) >= graph.peak(list(range(len(order)))):
        return block
    return relax.DataflowBlock([graph.bindings[i] for i in order])


def order_for_memory(mod: tvm.IRModule, func: relax.Function) -> relax.Function:
    """``func`` with each dataflow block reordered (see the module docstring)."""
    blocks = list(func.body.blocks)
    changed = False
    for at, block in enumerate(blocks):
        if not isinstance(block, relax.DataflowBlock):
            continue
        new = reordered_block(block, read_after_block(func, at))
        changed |= new is not block
        blocks[at] = new
    if not changed:
        return func
    return relax.BlockBuilder(mod).normalize(relax.Function(
        func.params, relax.SeqExpr(blocks, func.body.body), func.ret_ty, func.is_pure, func.attrs))


@tvm.transform.module_pass(opt_level=0, name="texscope.OrderForMemory")
def OrderForMemory(mod: tvm.IRModule, _ctx) -> tvm.IRModule:  # pylint: disable=invalid-name
    """Reorder dataflow blocks so fewer tensors are alive at once (see the
    module docstring)."""
    functions = {}
    for gvar, func in mod.functions_items():
        functions[gvar] = order_for_memory(mod, func) if isinstance(func, relax.Function) else func
    return tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos)

