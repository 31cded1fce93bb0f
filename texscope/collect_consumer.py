"""Stage 2: the storage every consumer demands of every tensor it reads.

Analysis only.  For each tensor operand of each call, the registry says which
storages the kernel accepts; a tensor that cannot be a texture (see
:meth:`TextureTarget.fit`) is accepted as a buffer by everyone.  The function's
return is a consumer too: callers read buffers.
"""

from __future__ import annotations

import attrs
import tvm
from tvm import relax

from .ir.graph import FunctionGraph, build_graph
from .knowledge.registry import BUFFER, Storage
from .knowledge.targets import TextureTarget

RETURN = "return"


@attrs.frozen
class Demand:
    """What one consumer asks of one tensor.

    Parameters
    ----------
    consumer : str
        The consuming binding's variable, or ``"return"``.
    call : int or None
        Index of the consuming :class:`CallSite`, None for the return.
    operand : int
        Which kernel input (or returned value) it is.
    accepts : frozenset of Storage
        Storages the consumer can read without a copy.
    wants : Storage
        The storage it prefers: a texture where it accepts one and the gain
        is not negative.
    entry : str
        The registry entry the demand comes from.
    reason : str
        Why, in words.
    gain : float
        What reading it as a texture saves, as a fraction of its bytes
        (negative: what it costs), by the target's cost profile.
    """

    consumer: str
    call: int | None
    operand: int
    accepts: frozenset
    wants: Storage
    entry: str
    reason: str
    gain: float = 0.0


@attrs.frozen
class ConsumerInfo:
    """Demands on every tensor of one function.

    Parameters
    ----------
    graph : FunctionGraph
        The function's dataflow.
    demands : tuple of tuple of Demand
        Per tensor (indexed like ``graph.tensors``), its consumers' demands in
        binding order.
    """

    graph: FunctionGraph
    demands: tuple[tuple[Demand, ...], ...]

    def of(self, name: str) -> tuple[Demand, ...]:
        """The demands on the tensor a variable holds."""
        return self.demands[self.graph.tensor(name).index]


def _demand(graph: FunctionGraph, tensor: int, consumer: str, call: int | None, operand: int,
            accepted: frozenset, entry: str, note: str, gain: float = 0.0) -> Demand:
    fit = graph.tensors[tensor].fit
    if fit.scope is None and Storage.TEXTURE in accepted:
        accepted, note = BUFFER, f"cannot be a texture: {fit.reason}"
    # Either storage: a texture unless reading one costs (a negative gain).
    wants = Storage.TEXTURE if Storage.TEXTURE in accepted and (
        gain >= 0 or Storage.BUFFER not in accepted) else Storage.BUFFER
    return Demand(consumer, call, operand, frozenset(accepted), wants, entry, note, gain)


def consumer_demands(graph: FunctionGraph) -> ConsumerInfo:
    """Collect the demands of a graph already built."""
    demands: list[list[Demand]] = [[] for _ in graph.tensors]
    for site in graph.calls:
        for operand, tensor in enumerate(site.operands):
            if tensor is None:
                continue
            demands[tensor].append(
                _demand(graph, tensor, site.name, site.index, operand,
                        site.support.input(operand), site.support.name, site.support.note,
                        graph.texture.profile.read_gain(site.support,
                                                        graph.tensors[tensor].is_weight))
            )
    for position, tensor in enumerate(graph.returned):
        demands[tensor].append(
            _demand(graph, tensor, RETURN, None, position, BUFFER, RETURN,
                    "returned to the caller, which reads buffers")
        )
    return ConsumerInfo(graph, tuple(tuple(d) for d in demands))


def collect_consumer(
    mod: tvm.IRModule, function: str | relax.GlobalVar, texture: TextureTarget
) -> ConsumerInfo:
    """Stage 2 on one Relax function of a module.

    Parameters
    ----------
    mod : IRModule
        The output of stage 1.
    function : str or GlobalVar
        The Relax function to analyse.
    texture : TextureTarget
        The target, with its texture limits.

    Returns
    -------
    ConsumerInfo
    """
    gvar = mod.get_global_var(function) if isinstance(function, str) else function
    return consumer_demands(build_graph(mod, gvar, texture))
