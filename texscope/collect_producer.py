"""Stage 3: the final storage of every tensor, settling conflicting consumers.

Analysis only.  A producer may write any storage its kernel supports (the
registry's output sets; a parameter or constant may arrive in either).  Among
those it takes the one that needs the fewest copies for its consumers, then
the fewest bytes copied, then texture over buffer.  A consumer that cannot read
the chosen storage reads a copy in the storage it wants; consumers wanting the
same copy share it, so a tensor is copied at most once per storage.
"""

from __future__ import annotations

import attrs

from .collect_consumer import ConsumerInfo, Demand
from .graph import FunctionGraph, Tensor
from .registry import ANY, BUFFER, Storage
from .targets import BUFFER_SCOPE

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
    """

    consumers: ConsumerInfo
    choices: tuple[ScopeChoice, ...]
    reads: tuple[tuple[str | None, ...], ...]

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


def _writable(graph: FunctionGraph, tensor: Tensor, producer_sets: dict[int, frozenset]):
    if tensor.fit.scope is None:
        return BUFFER, f"buffer: {tensor.fit.reason}"
    if tensor.origin == "call":
        allowed = producer_sets[tensor.index]
        if Storage.TEXTURE not in allowed:
            return allowed, "its producer's kernel writes only buffers"
        return allowed, ""
    if tensor.origin == "param" and graph.params_are_buffers:
        return BUFFER, "other Relax functions call this one with buffers"
    return ANY, ""


def _cost(tensor: Tensor, storage: Storage, demands: tuple[Demand, ...]):
    targets = sorted({d.wants.value for d in demands if storage not in d.accepts})
    copies = len(targets)
    return copies, copies * tensor.nbytes, targets


def decide(tensor: Tensor, allowed: frozenset, demands: tuple[Demand, ...], limit_note: str):
    """Choose one tensor's storage; returns (ScopeChoice, read storage per demand)."""
    candidates = [s for s in _PREFERENCE if s in allowed]
    if not demands:
        # Nobody reads it: nothing gains from a texture.
        candidates = [s for s in reversed(candidates)]

    def key(storage: Storage):
        copies, nbytes, _ = _cost(tensor, storage, demands)
        return copies, nbytes

    storage = min(candidates, key=key)  # min is stable: preference breaks ties
    copies, nbytes, targets = _cost(tensor, storage, demands)
    direct = [d.consumer for d in demands if storage in d.accepts]
    copied = [d.consumer for d in demands if storage not in d.accepts]
    parts = [f"{storage.value}"]
    if direct:
        parts.append(f"read directly by {', '.join(direct)}")
    if copied:
        parts.append(f"copied to {', '.join(targets)} for {', '.join(copied)}")
    if limit_note:
        parts.append(limit_note)
    choice = ScopeChoice(
        tensor=tensor.name,
        storage=storage,
        scope=scope_of(tensor, storage),
        copied_to=tuple(scope_of(tensor, Storage(t)) for t in targets),
        copied_for=tuple(copied),
        copy_bytes=nbytes,
        reason="; ".join(parts),
    )
    reads = [storage if storage in d.accepts else d.wants for d in demands]
    return choice, reads


def collect_producer(consumers: ConsumerInfo) -> ProducerInfo:
    """Stage 3: decide every tensor's storage from the stage-2 demands.

    Parameters
    ----------
    consumers : ConsumerInfo
        The result of :func:`texscope.collect_consumer.collect_consumer`,
        which carries the module's function and target it was made from.

    Returns
    -------
    ProducerInfo
    """
    graph = consumers.graph
    producer_sets = {}
    for site in graph.calls:
        for field, tensor in enumerate(site.outputs):
            producer_sets[tensor] = site.support.output(field)
    reads: list[list[str | None]] = [[None] * len(site.operands) for site in graph.calls]
    choices = []
    for tensor in graph.tensors:
        demands = consumers.demands[tensor.index]
        allowed, note = _writable(graph, tensor, producer_sets)
        choice, read_storages = decide(tensor, allowed, demands, note)
        choices.append(choice)
        for demand, storage in zip(demands, read_storages):
            if demand.call is not None:
                reads[demand.call][demand.operand] = scope_of(tensor, storage)
    return ProducerInfo(consumers, tuple(choices), tuple(tuple(r) for r in reads))
