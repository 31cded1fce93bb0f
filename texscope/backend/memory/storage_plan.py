"""texscope's own storage assignment: best fit by tensor lifetime.

TVM 0.27's ``StaticPlanBlockMemory`` hands each tensor, in program order, a
freed storage whose size is within 16x of its own (growing a smaller one if
need be), and a storage keeps its size for its whole life: a 64 KiB tensor
that takes a freed 1 MiB storage holds the MiB until it dies, while the
tensors made meanwhile need storages of their own.  Buffer plans lose memory
to it too (pose_landmark_full's all-buffer build peaks 4.1 MiB over what
this planner gives it), texture plans more often (hand_recrop's was 0.56 MiB
over the all-buffer build's, whose storages happened to fit), as an image
storage is sized by the image's 2-D extent with aligned rows, and a plan that
packs an RGB input or pads channels to texels makes tensors the buffer plan
does not have.

:func:`PlanStorages` runs right after ``StaticPlanBlockMemory`` and assigns
again, per binding block, every storage that planner made whose tensors are
all of static shape and at offset 0, and which nothing but their
``alloc_tensor`` reads.
The tensors keep their places and types; only which storage each one lives
in, and how large each storage is, change.  A storage lives from its first
tensor's allocation to its last tensor's last use (``KillAfterLastUse``
frees it there) and is as large as its largest tensor, an image's bytes
with aligned rows where the tensor is one.  Tensors share storages only on
one device and in one storage scope (TVM's rule; tensors of any texture
flavour and buffers share a ``global`` storage, which the OpenCL runtime
views as each tensor needs).

:func:`assign` decides.  No plan can peak lower than every tensor in a
storage of its own; sharing a storage saves allocations and what TVM's
pooled allocator keeps, but holds the storage's bytes between its tensors.
Tensors are placed largest first, so each storage is as large as its first
tensor: each goes into the storage it wastes the least in (bytes times
steps held beyond its own) among those whose tensors' lifetimes it does not
overlap and which keep the plan's peak, counting every tensor not yet placed
in a storage of its own, within a budget; else into a new storage.  A
placement may have to run over the least peak while it is built (a later
tensor filling a gap brings it back), so budgets from 0 to 100% over it are
tried and the plan of least peak, then least pooled memory, then fewest
storages is kept.  The peak is what the Relax VM needs with its naive
allocator (``memory_cfg="naive"``) and what its default pooled allocator
falls back to when the device runs out (it releases the blocks it keeps and
retries); ``DeviceMemory.pooled_bytes`` is what the pooled one keeps
otherwise.
"""

from __future__ import annotations


import attrs
import numpy as np
import tvm
from tvm import relax

from ...ir.graph import (ALLOC_STORAGE, ALLOC_TENSOR, handle, nbytes, new_call,
                         read_after_block, vars_read)
from .device_memory import (POOL_PAGE, TVM_PLANNER, SizeTextureStorages, allocated_tensor, op_name,
                            pooled_bytes, shape_expr_dims, storage_bytes)

BUILTIN_ALLOC_TENSOR = "relax.builtin.alloc_tensor"
# How far over the least peak a placement may run while it is built.
BUDGET_SLACKS = (0.0, 0.05, 0.1, 0.25, 0.5, 1.0)
# Operators whose result is the same memory as their first argument.
VIEWS = frozenset({"relax.reshape", "relax.memory.view", "relax.memory.ensure_zero_offset"})


@attrs.frozen
class Lifetime:
    """One tensor to place: alive from binding ``start`` to ``end`` (both
    included), ``need`` bytes, in storages of ``group`` (device and scope)."""

    start: int
    end: int
    need: int
    group: object = None


@attrs.frozen
class Assignment:
    """Which storage each tensor lives in (``storage[i]`` for tensor ``i``)
    and each storage's bytes."""

    storage: tuple[int, ...]
    sizes: tuple[int, ...]


class _Storage:
    def __init__(self, group, size: int, first: int, last: int):
        self.group, self.size, self.first, self.last = group, size, first, last
        self.intervals: list[tuple[int, int]] = [(first, last)]

    def overlaps(self, start: int, end: int) -> bool:
        return any(start <= b and a <= end for a, b in self.intervals)

    def added(self, start: int, end: int) -> tuple[tuple[int, int], ...]:
        """Steps the storage would newly live through, holding [start, end]."""
        if start < self.first:
            return ((start, self.first - 1),)
        if end > self.last:
            return ((self.last + 1, end),)
        return ()


def _greedy(lifetimes: list[Lifetime], order: list[int], budget: float, base: np.ndarray):
    """Place tensors in ``order`` (largest first): each into the storage it
    wastes least in (bytes x steps held beyond its own) without taking the
    plan's running peak over ``budget``, else into a new storage.  Also
    returns whether the budget turned a storage down: where it did not, any
    larger budget places every tensor alike."""
    # Bytes live per step, every tensor not yet placed counted in a storage
    # of its own: the finished plan's profile so far, exactly.
    profile = base.copy()
    binding = False
    for t in lifetimes:
        profile[t.start:t.end + 1] += t.need
    storages: list[_Storage] = []
    placed = [0] * len(lifetimes)
    for i in order:
        t = lifetimes[i]
        profile[t.start:t.end + 1] -= t.need
        best = None  # (waste, size, index)
        for index, storage in enumerate(storages):
            # (Placed largest first, a storage is never smaller than a tensor
            # placed later; the size test keeps that true for any order.)
            if (storage.group != t.group or storage.size < t.need
                    or storage.overlaps(t.start, t.end)):
                continue
            added = storage.added(t.start, t.end)
            if any(int(profile[a:b + 1].max()) + storage.size > budget for a, b in added):
                binding = True
                continue
            waste = storage.size * sum(b - a + 1 for a, b in added) - t.need * (t.end - t.start + 1)
            if best is None or (waste, storage.size, index) < best:
                best = (waste, storage.size, index)
        if best is None:
            storages.append(_Storage(t.group, t.need, t.start, t.end))
            profile[t.start:t.end + 1] += t.need
            placed[i] = len(storages) - 1
            continue
        storage = storages[best[2]]
        for a, b in storage.added(t.start, t.end):
            profile[a:b + 1] += storage.size
        storage.first, storage.last = min(storage.first, t.start), max(storage.last, t.end)
        storage.intervals.append((t.start, t.end))
        placed[i] = best[2]
    return Assignment(tuple(placed), tuple(s.size for s in storages)), storages, binding


def _pooled(storages: list[_Storage]) -> int:
    """What TVM's pooled allocator holds after a run of these storages
    (``memory._Lifetimes.pooled``: freed blocks serve later storages of the
    same page-rounded size)."""
    # At one step a storage is made before another is freed: both are live then.
    events = sorted([(s.first, 0, s.size) for s in storages]
                    + [(s.last, 1, s.size) for s in storages])
    return pooled_bytes((size, bool(freed)) for _, freed, size in events)


def _fit_to_pool(storages: list[_Storage], base: np.ndarray) -> None:
    """Grow storages to the size of a block TVM's pooled allocator holds free
    when they are made, where that keeps the peak: the pool then serves
    them instead of allocating again (it matches page-rounded sizes exactly)."""
    if not storages:
        return
    profile = base.copy()
    for s in storages:
        profile[s.first:s.last + 1] += s.size
    peak = int(profile.max())
    events = sorted([(s.first, 0, i) for i, s in enumerate(storages)]
                    + [(s.last, 1, i) for i, s in enumerate(storages)])
    free: dict[int, int] = {}
    for _, freed, i in events:
        storage = storages[i]
        rounded = -(-storage.size // POOL_PAGE) * POOL_PAGE
        if freed:
            free[rounded] = free.get(rounded, 0) + 1
            continue
        if free.get(rounded):
            free[rounded] -= 1
            continue
        top = int(profile[storage.first:storage.last + 1].max())
        larger = sorted(size for size, count in free.items()
                        if count and size > rounded and top + size - storage.size <= peak)
        if larger:
            grown = larger[0]
            free[grown] -= 1
            profile[storage.first:storage.last + 1] += grown - storage.size
            storage.size = grown


def _peak(storages: list[_Storage], base: np.ndarray) -> int:
    profile = base.copy()
    for s in storages:
        profile[s.first:s.last + 1] += s.size
    return int(profile.max())


def _storages_of(lifetimes: list[Lifetime], plan: Assignment) -> list[_Storage]:
    storages = [_Storage(None, size, 1 << 62, -1) for size in plan.sizes]
    for storage in storages:
        storage.intervals = []
    for t, index in zip(lifetimes, plan.storage):
        storage = storages[index]
        storage.group = t.group
        storage.first, storage.last = min(storage.first, t.start), max(storage.last, t.end)
        storage.intervals.append((t.start, t.end))
    return [s for s in storages if s.intervals]


def assign(lifetimes: list[Lifetime], background=(), given: Assignment | None = None) -> Assignment:
    """Storages for ``lifetimes``, best fit by lifetime (see the module docstring).

    Tensors are placed largest first, so each storage is as large as its
    first tensor; two tensors share a storage only when their lifetimes do
    not overlap and their groups are equal.  The least peak any assignment
    can have is every tensor in a storage of its own; a storage shared
    holds its bytes between its tensors too.  Greedy placements that may
    run over that least peak by a budget of 0 to 100% (placing later tensors
    in gaps can bring a plan back under it), and ``given`` (TVM's), are
    compared, and the one of least peak, then least memory held by TVM's
    pooled allocator, then fewest storages is kept.

    Parameters
    ----------
    lifetimes : list of Lifetime
        The tensors to place.
    background : sequence of (start, end, bytes)
        Memory alive meanwhile that is not placed here (storages of symbolic
        tensors, the function's results): it counts in the peak.
    given : Assignment, optional
        An assignment of ``lifetimes`` to weigh too.
    """
    if not lifetimes:
        return Assignment((), ())
    steps = max([t.end for t in lifetimes] + [end for _, end, _ in background]) + 1
    base = np.zeros(steps, dtype=np.int64)
    for start, end, size in background:
        base[start:end + 1] += size
    order = sorted(range(len(lifetimes)), key=lambda i: (-lifetimes[i].need, lifetimes[i].start, i))
    alone = _peak([_Storage(t.group, t.need, t.start, t.end) for t in lifetimes], base)
    plans = []
    # The pool serves the memory not placed here too, from blocks freed before.
    fixed = [_Storage(None, size, start, end) for start, end, size in background]
    if given is not None:
        storages = _storages_of(lifetimes, given)
        plans.append(((_peak(storages, base), _pooled(storages + fixed), len(storages)), given))
    for slack in BUDGET_SLACKS:
        plan, storages, binding = _greedy(lifetimes, order, alone * (1 + slack), base)
        _fit_to_pool(storages, base)
        plan = attrs.evolve(plan, sizes=tuple(s.size for s in storages))
        plans.append(((_peak(storages, base), _pooled(storages + fixed), len(storages)), plan))
        if not binding:  # the larger budgets' plans are this one
            break
    return min(plans, key=lambda scored: scored[0])[1]


def _is_alias(value) -> bool:
    """Whether a binding's value is (part of) the memory of what it reads."""
    names = (relax.Var, relax.Tuple, relax.TupleGetItem)
    return isinstance(value, names) or op_name(value) in VIEWS


def _device_group(mod: tvm.IRModule, alloc_storage: relax.Call) -> tuple:
    """Which storages may hold one another's tensors: those on one device,
    of one memory scope.  The call names a VDevice, whose memory scope is
    that of the tensor it was made for, not the storage's: TVM's planner
    shares a storage between tensors of any texture flavour and buffers."""
    index = int(alloc_storage.args[1])
    vdevices = mod.global_infos.get("vdevice", []) if mod.global_infos else []
    device = (index,)
    if 0 <= index < len(vdevices):
        device = (vdevices[index].target.kind.name, int(vdevices[index].vdevice_id))
    return (*device, str(alloc_storage.args[2].value))


@attrs.frozen
class _Held:
    """A tensor made from a storage the planner made: where and how much."""

    binding: int
    storage: relax.Var
    lifetime: Lifetime


def _held_tensors(mod: tvm.IRModule, bindings, read_later: set):
    """The tensors of one binding block that texscope may place again: those
    of static storages whose every tensor is static, at offset 0, and
    which nothing but their tensors reads; and (start, end, bytes) of the
    memory it may not, taken to live to the block's end (the function's
    results, allocated as ``builtin.alloc_tensor``, and the other storages).
    ``read_later``: the handles of the variables read after the block (a
    tensor read there lives to its end)."""
    # Keyed by the variables' handles.
    storages: dict = {}  # storage -> [group, placeable, binding, bytes]
    tensors: dict = {}  # tensor -> [binding, storage var, need, last use]
    roots: dict = {}  # var -> the tensors whose memory it is
    results: list = []
    for j, binding in enumerate(bindings):
        value, name = binding.value, op_name(binding.value)
        key = handle(binding.var)
        if name == ALLOC_STORAGE:
            static = shape_expr_dims(value.args[0]) is not None
            storages[key] = [_device_group(mod, value), static, j,
                             storage_bytes(value) if static else 0]
            continue
        if name == BUILTIN_ALLOC_TENSOR:
            shape = shape_expr_dims(value.args[0])
            if shape is not None:
                results.append((j, len(bindings), nbytes(shape, value.args[1].value)))
        if name == ALLOC_TENSOR and handle(value.args[0]) in storages:
            storage = value.args[0]
            offset = value.args[1]
            static = shape_expr_dims(value.args[2]) is not None
            if not static or not isinstance(offset, tvm.tirx.IntImm) or int(offset) != 0:
                storages[handle(storage)][1] = False
                continue
            need = allocated_tensor(mod, value, binding.var.ty).needed
            tensors[key] = [j, storage, need, j]
            roots[key] = (key,)
            continue
        read = [handle(var) for var in vars_read(value)]
        for var in read:
            if var in storages:  # a storage read other than by its tensors
                storages[var][1] = False
            for root in roots.get(var, ()):
                tensors[root][3] = j
        if _is_alias(value):
            aliased = tuple(r for var in read for r in roots.get(var, ()))
            if aliased:
                roots[key] = aliased
    for var, aliased in roots.items():
        if var in read_later:
            for root in aliased:
                tensors[root][3] = len(bindings)
    held = [_Held(j, storage, Lifetime(j, last, need, storages[handle(storage)][0]))
            for j, storage, need, last in tensors.values()
            if storages[handle(storage)][1]]
    others = [(j, len(bindings), size) for _, placeable, j, size in storages.values()
              if not placeable]
    return held, results + others


def _replanned_block(mod: tvm.IRModule, builder: relax.BlockBuilder, block, read_later: set):
    bindings = list(block.bindings)
    held, background = _held_tensors(mod, bindings, read_later)
    if not held:
        return block
    # TVM's own assignment, each storage sized by its largest tensor.
    index: dict = {}
    for h in held:
        index.setdefault(handle(h.storage), len(index))
    sizes = [0] * len(index)
    for h in held:
        number = index[handle(h.storage)]
        sizes[number] = max(sizes[number], h.lifetime.need)
    tvms = Assignment(tuple(index[handle(h.storage)] for h in held), tuple(sizes))
    plan = assign([h.lifetime for h in held], background, tvms)
    by_binding = {h.binding: (h, plan.storage[i]) for i, h in enumerate(held)}
    old = {handle(h.storage) for h in held}
    origin = {}  # storage handle -> its alloc_storage call
    for binding in bindings:
        if handle(binding.var) in old:
            origin[handle(binding.var)] = binding.value
    made: dict[int, relax.Var] = {}
    out = []
    for j, binding in enumerate(bindings):
        if handle(binding.var) in old:
            continue
        if j in by_binding:
            tensor, index = by_binding[j]
            if index not in made:
                call = origin[handle(tensor.storage)]
                size = relax.ShapeExpr([tvm.tirx.IntImm("int64", plan.sizes[index])])
                value = builder.normalize(new_call(call.op, [size, *call.args[1:]], call.attrs,
                                                   call.ty_args))
                made[index] = type(tensor.storage)("storage", value.ty)
                out.append(relax.VarBinding(made[index], value))
            call = binding.value
            binding = relax.VarBinding(binding.var, builder.normalize(
                new_call(call.op, [made[index], *call.args[1:]], call.attrs, call.ty_args)))
        out.append(binding)
    return type(block)(out)


def plan_storages(mod: tvm.IRModule, func: relax.Function) -> relax.Function:
    """``func`` (planned by ``StaticPlanBlockMemory``) with its storages
    assigned by :func:`assign`."""
    builder = relax.BlockBuilder(mod)
    blocks = [_replanned_block(mod, builder, block, read_after_block(func, i))
              for i, block in enumerate(func.body.blocks)]
    if all(new.same_as(old) for new, old in zip(blocks, func.body.blocks)):
        return func
    body = relax.SeqExpr(blocks, func.body.body)
    return builder.normalize(
        relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs))


@tvm.transform.module_pass(opt_level=0, name="texscope.PlanStorages")
def PlanStorages(mod: tvm.IRModule, _ctx) -> tvm.IRModule:  # pylint: disable=invalid-name
    """Assign the storages ``StaticPlanBlockMemory`` made again, best fit by
    lifetime, each as large as its largest tensor (see the module docstring)."""
    functions = {}
    for gvar, func in mod.functions_items():
        functions[gvar] = plan_storages(mod, func) if isinstance(func, relax.Function) else func
    return tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos)


def with_planned_storages(finalize: list) -> list:
    """``finalize`` (TVM's finalize passes) with :func:`PlanStorages` and then
    :func:`texscope.backend.memory.device_memory.SizeTextureStorages` (for the storages it
    leaves: those of symbolic tensors) right after TVM's memory planning."""
    names = [p.info.name for p in finalize]
    if TVM_PLANNER not in names:
        return list(finalize)
    at = names.index(TVM_PLANNER) + 1
    return [*finalize[:at], PlanStorages, SizeTextureStorages, *finalize[at:]]
