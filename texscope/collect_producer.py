"""Stage 3: the final storage of every tensor, settling conflicting consumers.

Analysis only.  A producer may write any storage its kernel supports (the
registry's output sets; a parameter or constant may arrive in either, a
weight parameter in a buffer).  A
consumer that cannot read that storage reads a copy in one it can; consumers
wanting the same copy share it, so a tensor is copied at most once per storage.

Two policies:

``"local"``
    Each tensor alone: the storage needing the fewest copies, then the fewest
    bytes copied, then texture over buffer.
``"optimal"`` (default)
    All tensors together, minimising the plan's cost (:mod:`texscope.planner.cost`):
    bytes copied plus a launch price per copy, minus what texture reads and
    writes save (the target's cost profile prices all three), subject to the registry's per-operand sets and sync rules.  Exact: the
    cost is a sum of unary and submodular pairwise terms over binary labels
    (texture or buffer) once each tensor also gets "a texture version exists"
    and "a buffer version exists" labels, so one minimum s-t cut minimises it
    (:mod:`texscope.planner.mincut`).
"""

from __future__ import annotations

import attrs

from .planner import cost
from .collect_consumer import ConsumerInfo, Demand, consumer_demands
from .errors import TexscopeError
from .ir.graph import FunctionGraph, Tensor
from .planner import tuned
from .planner.mincut import INFINITE, BinaryEnergy
from .knowledge.profile import extreme_profiles
from .knowledge.registry import ANY, BUFFER, Storage
from .knowledge.targets import BUFFER_SCOPE, is_texture_scope

POLICIES = ("optimal", "local")
_PREFERENCE = (Storage.TEXTURE, Storage.BUFFER)


@attrs.frozen
class ScopeChoice:
    """The storage chosen for one tensor.

    Parameters
    ----------
    tensor : str
        The variable holding it.
    storage : Storage
        Buffer or texture.
    scope : str
        The memory scope, e.g. ``"global.texture-nhwc"`` or ``"global"``.
    copied_to : tuple of str
        Scopes of the copies that consumers read instead.
    copied_for : tuple of str
        The consumers that read a copy.
    copy_bytes : int
        Bytes those copies move.
    reason : str
        Why, in words.
    """

    tensor: str
    storage: Storage
    scope: str
    copied_to: tuple[str, ...]
    copied_for: tuple[str, ...]
    copy_bytes: int
    reason: str


@attrs.frozen
class ProducerInfo:
    """Storage decisions for one function.

    Parameters
    ----------
    consumers : ConsumerInfo
        The stage-2 result the decisions were made from.
    choices : tuple of ScopeChoice
        Per tensor (indexed like ``graph.tensors``).
    reads : tuple of tuple of (str or None)
        Per call, the memory scope each operand is read in (None for
        non-tensor operands).
    policy : str
        The policy that decided.
    """

    consumers: ConsumerInfo
    choices: tuple[ScopeChoice, ...]
    reads: tuple[tuple[str | None, ...], ...]
    policy: str = "optimal"
    tuned: object = attrs.field(default=None, eq=False)  # a TunedPlan, with a tuning file

    @property
    def graph(self) -> FunctionGraph:
        return self.consumers.graph

    def of(self, name: str) -> ScopeChoice:
        """The choice for the tensor a variable holds."""
        return self.choices[self.graph.tensor(name).index]

    @property
    def copies(self) -> int:
        return sum(len(c.copied_to) for c in self.choices)


def scope_of(tensor: Tensor, storage: Storage) -> str:
    return tensor.fit.scope if storage is Storage.TEXTURE else BUFFER_SCOPE


def writable(graph: FunctionGraph, tensor: Tensor) -> tuple[frozenset, str]:
    """Storages a tensor can be written in, and why not the others."""
    if tensor.fit.scope is None:
        return BUFFER, f"buffer: {tensor.fit.reason}"
    if tensor.origin == "weight":
        # Its caller passes a buffer (what <function>_transform_params returns);
        # an image would be a copy on every run.
        return BUFFER, "buffer: a weight parameter (after num_input), passed in a buffer"
    if tensor.origin == "call":
        site, field = graph.producer(tensor.index)
        allowed = site.support.output(field)
        if Storage.TEXTURE not in allowed:
            return allowed, "its producer's kernel writes only buffers"
        return allowed, ""
    return ANY, ""


def decide(tensor: Tensor, allowed: frozenset, demands: tuple[Demand, ...]):
    """The local rule for one tensor; returns (storage, read storage per demand)."""
    candidates = [s for s in _PREFERENCE if s in allowed]
    if not any(Storage.TEXTURE in d.accepts for d in demands):
        # Nobody reads a texture: nothing gains from one.
        candidates.reverse()

    def key(storage: Storage):
        targets = {d.wants for d in demands if storage not in d.accepts}
        return len(targets), len(targets) * tensor.nbytes

    storage = min(candidates, key=key)  # min is stable: preference breaks ties
    return storage, [storage if storage in d.accepts else d.wants for d in demands]


def _local(consumers: ConsumerInfo):
    graph = consumers.graph
    storages, reads = [], []
    for tensor in graph.tensors:
        allowed, _ = writable(graph, tensor)
        storage, read = decide(tensor, allowed, consumers.demands[tensor.index])
        storages.append(storage)
        reads.append(read)
    return storages, reads


def _optimal(consumers: ConsumerInfo):
    graph = consumers.graph
    launch = cost.launch_bytes(graph)
    energy = BinaryEnergy()
    written, texture_exists, buffer_absent = [], [], []
    for tensor in graph.tensors:
        s, z, w = energy.variable(), energy.variable(), energy.variable()
        written.append(s), texture_exists.append(z), buffer_absent.append(w)
        allowed, _ = writable(graph, tensor)
        # Even with no texture reader, writing a texture can pay: under a
        # "primary" sync rule it lets the kernel read its input as one.
        if Storage.TEXTURE not in allowed:
            energy.unary(s, 0, INFINITE)
        if Storage.BUFFER not in allowed:
            energy.unary(s, INFINITE, 0)
        price = cost.units(tensor.nbytes + launch)
        energy.unary(s, cost.units(cost.write_gain(graph, tensor) * tensor.nbytes), 0)
        energy.forbid(s, z, 1, 0)  # written as a texture: a texture version exists
        energy.forbid(s, w, 0, 1)  # written as a buffer: a buffer version exists
        energy.pairwise(s, z, 0, price, 0, 0)  # buffer written, texture needed: a copy
        energy.pairwise(s, w, 0, 0, price, 0)  # texture written, buffer needed: a copy

    groups: dict[tuple, int] = {}
    group_of: dict[tuple[int, int], int] = {}  # (tensor, demand position) -> group variable
    for tensor in graph.tensors:
        for position, demand in enumerate(consumers.demands[tensor.index]):
            sync = graph.calls[demand.call].support.sync_rules() if demand.call is not None else ()
            key = (demand.call, "inputs") if "inputs" in sync else (demand.call, demand.operand)
            if key not in groups:
                groups[key] = energy.variable()
            r = groups[key]
            group_of[(tensor.index, position)] = r
            if Storage.TEXTURE not in demand.accepts:
                energy.unary(r, 0, INFINITE)
            if Storage.BUFFER not in demand.accepts:
                energy.unary(r, INFINITE, 0)
            energy.unary(r, cost.units(demand.gain * tensor.nbytes), 0)  # forgone saving
            energy.forbid(r, texture_exists[tensor.index], 1, 0)
            energy.forbid(r, buffer_absent[tensor.index], 0, 1)
    for site in graph.calls:
        sync = site.support.sync_rules()
        if "primary" in sync and site.outputs and site.operands and site.operands[0] is not None:
            key = (site.index, "inputs") if "inputs" in sync else (site.index, 0)
            energy.pairwise(groups[key], written[site.outputs[0]], 0, INFINITE, INFINITE, 0)
        if "outputs" in sync:
            for other in site.outputs[1:]:
                energy.pairwise(written[site.outputs[0]], written[other], 0, INFINITE, INFINITE, 0)

    labels, minimum = energy.minimise()
    if minimum >= INFINITE:
        raise TexscopeError("the registry's sync rules admit no storage assignment",
                            graph.function)
    storages = [Storage.TEXTURE if labels[v] else Storage.BUFFER for v in written]
    reads = [
        [Storage.TEXTURE if labels[group_of[(t.index, p)]] else Storage.BUFFER
         for p in range(len(consumers.demands[t.index]))]
        for t in graph.tensors
    ]
    return storages, reads


def _demand_groups(consumers: ConsumerInfo):
    """(tensor, demand position) -> its demand group (a call's operand, or
    all its inputs under an ``"inputs"`` sync rule), and the pairs the sync
    rules tie, for :func:`texscope.planner.tuned.plan`."""
    graph = consumers.graph
    groups: dict[tuple, int] = {}
    group_of: dict[tuple[int, int], int] = {}
    for tensor in graph.tensors:
        for position, demand in enumerate(consumers.demands[tensor.index]):
            sync = graph.calls[demand.call].support.sync_rules() if demand.call is not None else ()
            key = (demand.call, "inputs") if "inputs" in sync else (demand.call, demand.operand)
            group_of[(tensor.index, position)] = groups.setdefault(key, len(groups))
    pairs = []
    for site in graph.calls:
        sync = site.support.sync_rules()
        if "primary" in sync and site.outputs and site.operands and site.operands[0] is not None:
            key = (site.index, "inputs") if "inputs" in sync else (site.index, 0)
            pairs.append(("rs", groups[key], site.outputs[0]))
        if "outputs" in sync:
            pairs += [("ss", site.outputs[0], other) for other in site.outputs[1:]]
    return group_of, pairs


def _tuned(consumers: ConsumerInfo):
    graph = consumers.graph
    group_of, pairs = _demand_groups(consumers)
    return tuned.plan(consumers, graph.texture.tuning, graph.texture.profile, group_of,
                      lambda tensor: writable(graph, tensor)[0], pairs,
                      extremes=_extremes(consumers))


def _extremes(consumers: ConsumerInfo) -> dict:
    """The all-buffer and all-texture plans as the build makes them (the
    profile planner under :func:`texscope.knowledge.profile.extreme_profiles`)
    and the default plan (under the target's own profile, the build without
    a tuning file): (storages, reads per tensor) each, for the tuned plan's
    guard."""
    graph = consumers.graph
    found = {}
    profiles = {**extreme_profiles(graph.texture.profile), tuned.DEFAULT: graph.texture.profile}
    for label, profile in profiles.items():
        texture = attrs.evolve(graph.texture, profile=profile, tuning=None)
        found[label] = _optimal(consumer_demands(attrs.evolve(graph, texture=texture)))
    return found


def measured_seconds(plan: ProducerInfo) -> float | None:
    """``plan`` (made by any policy) priced by the tuning file its graph's
    target carries: the time it predicts for the plan's kernels and copies
    (scaled to the model's own runs where the file has them); None where the
    plan runs a variant the tuning never measured."""
    graph = plan.graph
    group_of, pairs = _demand_groups(plan.consumers)
    storages = [c.storage for c in plan.choices]

    def read(tensor, demand):
        if demand.call is None:  # the return reads what is written
            return storages[tensor.index]
        scope = plan.reads[demand.call][demand.operand] or ""
        return Storage.TEXTURE if is_texture_scope(scope) else Storage.BUFFER

    reads = [[read(t, d) for d in plan.consumers.demands[t.index]] for t in graph.tensors]
    priced = tuned.plan(plan.consumers, graph.texture.tuning, graph.texture.profile, group_of,
                        lambda tensor: writable(graph, tensor)[0], pairs, (storages, reads),
                        extremes=_extremes(plan.consumers))
    return None if priced is None else priced.predicted_s


def _choice(tensor: Tensor, storage: Storage, demands, read, note: str, policy: str) -> ScopeChoice:
    copied = [d.consumer for d, r in zip(demands, read) if r is not storage]
    targets = sorted({r.value for r in read if r is not storage})
    parts = [storage.value]
    direct = [d.consumer for d, r in zip(demands, read) if r is storage]
    if direct:
        parts.append(f"read directly by {', '.join(direct)}")
    if copied:
        parts.append(f"copied to {', '.join(targets)} for {', '.join(copied)}")
    if note:
        parts.append(note)
    if policy == "optimal" and storage is Storage.TEXTURE and copied:
        parts.append("the texture reads save more than the copy costs")
    readers = [d for d in demands if d.call is not None]
    if storage is Storage.BUFFER and tensor.fit.scope is not None and readers \
            and all(d.gain < 0 for d in readers):
        what = "a weight" if tensor.is_weight else "it"
        gains = ", ".join(sorted({f"{d.gain:+.3g}" for d in readers}))
        parts.append(f"the cost profile prices reading {what} from a texture below a buffer "
                     f"(read gain {gains} per byte)")
    return ScopeChoice(
        tensor=tensor.name,
        storage=storage,
        scope=scope_of(tensor, storage),
        copied_to=tuple(scope_of(tensor, Storage(t)) for t in targets),
        copied_for=tuple(copied),
        copy_bytes=len(targets) * tensor.nbytes,
        reason="; ".join(parts),
    )


def collect_producer(consumers: ConsumerInfo, policy: str = "optimal") -> ProducerInfo:
    """Stage 3: decide every tensor's storage from the stage-2 demands.

    Parameters
    ----------
    consumers : ConsumerInfo
        The result of :func:`texscope.collect_consumer.collect_consumer`,
        which carries the module's function and target it was made from.
    policy : str
        ``"optimal"`` or ``"local"`` (see the module docstring).

    Returns
    -------
    ProducerInfo
    """
    if policy not in POLICIES:
        raise TexscopeError(f"unknown policy {policy!r}; use one of {POLICIES}")
    graph = consumers.graph
    if policy == "local":
        synced = next((site for site in graph.calls if site.support.sync_rules()), None)
        if synced is not None:
            raise TexscopeError(
                f"the local policy cannot honour the sync rules of {synced.support.name}; "
                "use policy='optimal'", graph.function, synced.name)
    if policy == "optimal" and graph.texture is not None and graph.texture.tuning is not None:
        measured = _tuned(consumers)
        return attrs.evolve(plan_of(consumers, measured.storages, measured.reads, "tuned"),
                            tuned=measured)
    storages, reads_per_tensor = (_optimal if policy == "optimal" else _local)(consumers)
    return plan_of(consumers, storages, reads_per_tensor, policy)


def plan_of(consumers: ConsumerInfo, storages, reads_per_tensor, policy: str) -> ProducerInfo:
    """The plan writing each tensor in ``storages[t]`` and reading its demands
    in ``reads_per_tensor[t]`` (one storage per demand), with the reasons in
    words.  Nothing is checked: the exhaustive oracle hands it assignments
    the planner would refuse, for ``check_invariants`` to judge."""
    graph = consumers.graph
    reads: list[list[str | None]] = [[None] * len(site.operands) for site in graph.calls]
    choices = []
    for tensor, storage, read in zip(graph.tensors, storages, reads_per_tensor):
        demands = consumers.demands[tensor.index]
        _, note = writable(graph, tensor)
        choices.append(_choice(tensor, storage, demands, read, note, policy))
        for demand, r in zip(demands, read):
            if demand.call is not None:
                reads[demand.call][demand.operand] = scope_of(tensor, r)
    return ProducerInfo(consumers, tuple(choices), tuple(tuple(r) for r in reads), policy)
