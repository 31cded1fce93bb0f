"""The plan of least measured time: storages priced by a tuning file.

A tuning file (:mod:`texscope.opencl.tuning`) gives, per kernel of the
model, its time for each combination of its operands' storages, and each
copy's time.  The time of a plan is then the sum over kernels of the time of
the variant its storages select, plus its copies' times.  A kernel's time
depends on several operands at once, and not submodularly in general (a
kernel fast with both its input and output in textures and slow with either
alone is common), so the min-cut of :mod:`texscope.planner.mincut` cannot
take it exactly.  This module states it as a 0-1 linear program, solved
exactly by ``scipy.optimize.milp`` (HiGHS' branch and bound):

* ``s_t``: tensor ``t`` is written as a texture; ``r_g``: demand group ``g``
  (a call's operand, or all its inputs under an ``"inputs"`` sync rule)
  reads a texture; the registry's sets and sync rules fix or tie them, as in
  :mod:`texscope.collect_producer`;
* ``c_t >= r_g - s_t`` and ``b_t >= s_t - r_g`` for every demand of ``t``:
  a texture copy / a buffer copy of ``t`` exists (one per storage, shared);
* per tuned kernel, one-hot ``y_kv`` over its measured variants, and per
  operand position ``sum(y_kv for v texture there) = `` the storage variable
  of that position (the read of an input, the write of an output); a
  tensor inside a fused kernel is never copied (its reads equal its write);
* minimise ``sum(time_kv y_kv) + sum(copy time c_t, b_t)`` + the cost
  profile's prices (in seconds) for the calls no tuned kernel covers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import attrs
import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from ..errors import TexscopeError
from ..knowledge.registry import Storage
from ..knowledge.targets import is_texture_scope
from . import cost as plan_cost

MICROSECONDS = 1e6  # the program's costs, in microseconds: HiGHS' tolerances suit them


@attrs.frozen
class KernelUse:
    """One kernel of the build as the planner sees it: ``key`` (the tuning
    file's), the tensors at its operand positions (inputs, then outputs;
    names of the pre-fusion function's variables) and the calls it fuses."""

    key: str
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    members: tuple[str, ...]


@attrs.frozen
class MeasuredCosts:
    """A tuning file and the kernels of the build it prices, per function."""

    document: Mapping = attrs.field(eq=False, repr=False)
    uses: Mapping[str, tuple[KernelUse, ...]] = attrs.field(eq=False)
    # Per function, what each ``#k`` name of a fused group's output stands for.
    aliases: Mapping[str, Mapping[str, str]] = attrs.field(factory=dict, eq=False)
    origin: str = "tuning"

    def variants(self, key: str) -> list[tuple[tuple[bool, ...], float]]:
        """A kernel's measured variants: per position whether texture, and seconds."""
        kernel = self.document["kernels"].get(key)
        if kernel is None:
            return []
        return [(tuple(is_texture_scope(s) for s in v["scopes"]), float(v["seconds"]))
                for v in kernel["variants"]]

    def copy_seconds(self, shape, dtype: str, to_texture: bool) -> float | None:
        for copy in self.document["copies"]:
            if list(copy["shape"]) == list(shape) and copy["dtype"] == dtype \
                    and is_texture_scope(copy["target"]) == to_texture:
                return float(copy["seconds"])
        return None


@attrs.frozen
class KernelChoice:
    """A tuned kernel's chosen variant and its alternatives (seconds)."""

    kernel: str
    call: str
    chosen: tuple[str, ...]
    seconds: float
    alternatives: tuple[tuple[tuple[str, ...], float], ...]


@attrs.frozen
class TunedPlan:
    storages: tuple
    reads: tuple
    kernels: tuple[KernelChoice, ...]
    uncovered: tuple[str, ...]
    predicted_s: float


def _label(textures: tuple[bool, ...], positions) -> tuple[str, ...]:
    """``("in0=texture", "w1=buffer", "out0=texture")``."""
    return tuple(f"{p}={'texture' if t else 'buffer'}" for p, t in zip(positions, textures))


class Names:
    """Tensors of a graph by the names :class:`KernelUse` gives: a
    variable's; ``"=1x8:add3(a, b)"`` for the output, of shape 1x8, of the
    call of ``add3`` reading ``a`` and ``b`` (each a name of this form again,
    ``?`` for a constant); ``"N[i]"`` for field ``i`` of
    the tuple named ``N`` (FuseOps renames the variables it groups)."""

    def __init__(self, graph, aliases=None):
        self.graph = graph
        self.aliases = aliases or {}
        self.by_name: dict[str, int] = {}
        for tensor in graph.tensors:
            self.by_name.setdefault(tensor.name, tensor.index)
        self.by_reads: dict[tuple, list] = {}
        for site in graph.calls:
            self.by_reads.setdefault(self._reads(site.operands), []).append(site)
        self.taken: set[int] = set()  # outputs a name "=..." resolved to
        self.known: dict[str, int | None] = {}

    def __getitem__(self, name: str) -> int | None:
        # Every answer is kept, a failure too: names nest, and a model's
        # depth of them would otherwise be resolved again and again.
        if name in self.known:
            return self.known[name]
        found = self._resolve(name)
        self.known[name] = found
        if found is not None and name.startswith("="):
            self.taken.add(found)
        return found

    def _reads(self, operands) -> tuple:
        # Constants are read as "?": a fused group names none of them.
        return tuple("?" if self.graph.tensors[t].origin == "constant" else t
                     for t in operands if t is not None)

    def _site(self, name: str):
        start = name.index("(")
        shape, _, callee = name[1:start].partition(":")
        reads = tuple("?" if p == "?" else self[p] for p in _split(name[start + 1:-1]))
        if any(r is None for r in reads):
            return None
        candidates = [site for site in self.by_reads.get(reads, ())
                      if site.outputs and site.outputs[0] not in self.taken
                      and _shape(self.graph.tensors[site.outputs[0]]) == shape]
        # Calls reading the same tensors alike (a maximum and a minimum of
        # one tensor): the one whose registry entry the fused kernel names.
        named = [site for site in candidates if site.support.name.split("_")[0] in callee]
        return (named or candidates or [None])[0]

    def _resolve(self, name: str) -> int | None:
        if name in self.aliases:
            return self[self.aliases[name]]
        if name in self.by_name:
            return self.by_name[name]
        if name.endswith("]") and "[" in name:
            base, index = name[:name.rindex("[")], int(name[name.rindex("[") + 1:-1])
            if base.startswith("=") and base.endswith(")"):
                first = self[base]
                if first is None or first not in self.graph.producers:
                    return None
                site, _ = self.graph.producer(first)
                return site.outputs[index] if index < len(site.outputs) else None
            return self.by_name.get(name)
        if name.startswith("=") and name.endswith(")"):
            site = self._site(name)
            return site.outputs[0] if site is not None else None
        return None


def _shape(tensor) -> str:
    return "x".join(map(str, tensor.shape)) if tensor.shape is not None else ""


def _split(text: str) -> list[str]:
    """``"a, =(b, c), d"`` -> ``["a", "=(b, c)", "d"]``."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += (char == "(") - (char == ")")
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    if current.strip():
        parts.append(current.strip())
    return parts


def _members(graph, use: KernelUse, names: "Names"):
    """The call sites a kernel fuses, found back from its outputs to its
    inputs, and its operand tensors (None where a name is not found)."""
    tensors = [None if n == "?" else names[n] for n in (*use.inputs, *use.outputs)]
    if any(t is None for t, n in zip(tensors, (*use.inputs, *use.outputs)) if n != "?"):
        return None, None
    stop = set(tensors[:len(use.inputs)])
    sites, todo = {}, list(tensors[len(use.inputs):])
    while todo:
        tensor = todo.pop()
        if tensor in stop or tensor not in graph.producers:
            continue
        site, _ = graph.producer(tensor)
        if site.index in sites:
            continue
        sites[site.index] = site
        todo += [t for t in site.operands if t is not None]
    # Constants ("?"), in the order the group's calls read them (FuseOps
    # makes them its function's parameters in that order).
    constants = iter(t for index in sorted(sites) for t in sites[index].operands
                     if t is not None and graph.tensors[t].origin == "constant")
    tensors = [next(constants, None) if n == "?" else t
               for t, n in zip(tensors, (*use.inputs, *use.outputs))]
    if any(t is None for t in tensors):
        return None, None
    return sites, tensors


def plan(consumers, measured: MeasuredCosts, profile, group_of, allowed_of,
         sync_pairs, given=None) -> TunedPlan | None:
    """The storages of least measured time (see the module docstring).

    ``group_of`` maps (tensor, demand position) to its demand group (an
    int), ``allowed_of(t)`` is a tensor's writable storages, ``sync_pairs``
    (kinds, a, b) are variables forced equal (kinds ``"rs"``: group ``a``
    reads what tensor ``b`` is written as; ``"ss"``: two tensors written alike).
    ``given`` (storages, reads per tensor), a plan made otherwise, fixes
    every storage: the result then prices that plan by the same measured
    costs (None where it uses a variant the tuning never measured).
    """
    graph = consumers.graph
    per_byte = profile.copy_seconds_per_byte.value
    launch_s = profile.copy_seconds_per_launch.value
    cost: list[float] = []

    def var(c=0.0):
        cost.append(c)
        return len(cost) - 1

    s = [var() for _ in graph.tensors]
    r = {g: var() for g in sorted(set(group_of.values()))}
    tex_copy = [var() for _ in graph.tensors]
    buf_copy = [var() for _ in graph.tensors]
    rows, lo, hi = [], [], []

    def constrain(coeffs: dict, low: float, high: float):
        rows.append(coeffs), lo.append(low), hi.append(high)

    fixed: dict[int, int] = {}
    for tensor in graph.tensors:
        allowed = allowed_of(tensor)
        if Storage.TEXTURE not in allowed:
            fixed[s[tensor.index]] = 0
        if Storage.BUFFER not in allowed:
            fixed[s[tensor.index]] = 1
        for to_texture, column in ((True, tex_copy), (False, buf_copy)):
            seconds = measured.copy_seconds(tensor.shape, tensor.dtype, to_texture) \
                if tensor.shape is not None else None
            cost[column[tensor.index]] = seconds if seconds is not None else \
                tensor.nbytes * per_byte + launch_s
    for (tensor, position), group in group_of.items():
        demand = consumers.demands[tensor][position]
        g = r[group]
        if Storage.TEXTURE not in demand.accepts:
            fixed[g] = 0
        if Storage.BUFFER not in demand.accepts:
            fixed[g] = 1
        constrain({tex_copy[tensor]: 1, g: -1, s[tensor]: 1}, 0, math.inf)  # c >= r - s
        constrain({buf_copy[tensor]: 1, s[tensor]: -1, g: 1}, 0, math.inf)  # b >= s - r
    for kind, a, b in sync_pairs:
        va = r[a] if kind[0] == "r" else s[a]
        vb = r[b] if kind[1] == "r" else s[b]
        constrain({va: 1, vb: -1}, 0, 0)

    covered: set[int] = set()
    choices = []
    uncovered = []
    names = Names(graph, measured.aliases.get(graph.function))
    for use in measured.uses.get(graph.function, ()):
        variants = measured.variants(use.key)
        sites, operands = _members(graph, use, names)
        if not variants or sites is None or not sites or covered & set(sites):
            uncovered.append(use.name)
            continue
        positions = len(use.inputs) + len(use.outputs)
        if any(len(t) != positions for t, _ in variants):
            uncovered.append(use.name)
            continue
        n_in = len(use.inputs)
        inside = {t for site in sites.values() for t in site.outputs} - set(operands[n_in:])
        position_vars = []
        for index in operands[:n_in]:
            reading = sorted({group_of[(index, p)] for p, d in
                              enumerate(consumers.demands[index]) if d.call in sites})
            for other in reading[1:]:
                constrain({r[reading[0]]: 1, r[other]: -1}, 0, 0)
            position_vars.append(r[reading[0]] if reading else s[index])
        position_vars += [s[index] for index in operands[n_in:]]
        for index in inside:  # no copy inside a fused kernel
            for p, d in enumerate(consumers.demands[index]):
                if d.call in sites:
                    constrain({r[group_of[(index, p)]]: 1, s[index]: -1}, 0, 0)
        linked = set(position_vars)
        for index in inside:
            linked.add(s[index])
        for (tensor, p), group in group_of.items():
            demand = consumers.demands[tensor][p]
            if demand.call in sites and r[group] not in linked and tensor not in inside:
                fixed[r[group]] = 0  # read as the tuned variants read it: a buffer
        ys = [var(seconds) for _, seconds in variants]
        constrain({y: 1 for y in ys}, 1, 1)
        for p, v in enumerate(position_vars):
            coeffs = {y: 1 for y, (tex, _) in zip(ys, variants) if tex[p]}
            coeffs[v] = coeffs.get(v, 0) - 1
            constrain(coeffs, 0, 0)
        covered |= set(sites)
        choices.append((use, operands, ys, variants))

    # Calls no tuned kernel covers: the cost profile's prices, in seconds.
    for tensor in graph.tensors:
        if tensor.index in graph.producers and graph.producer(tensor.index)[0].index not in covered:
            cost[s[tensor.index]] -= plan_cost.write_gain(graph, tensor) * tensor.nbytes * per_byte
        for position, demand in enumerate(consumers.demands[tensor.index]):
            if demand.call is not None and demand.call not in covered:
                cost[r[group_of[(tensor.index, position)]]] -= \
                    demand.gain * tensor.nbytes * per_byte
    for site in graph.calls:
        if site.index not in covered and site.name not in uncovered:
            uncovered.append(site.name)

    if given is not None:
        storages_given, reads_given = given
        for tensor, storage in enumerate(storages_given):
            fixed[s[tensor]] = int(storage is Storage.TEXTURE)
        for (tensor, position), group in group_of.items():
            fixed[r[group]] = int(reads_given[tensor][position] is Storage.TEXTURE)
    n = len(cost)
    matrix = np.zeros((len(rows), n))
    for i, coeffs in enumerate(rows):
        for j, c in coeffs.items():
            matrix[i, j] += c
    low, high = np.zeros(n), np.ones(n)
    for j, value in fixed.items():
        low[j] = high[j] = value
    result = milp(np.array(cost) * MICROSECONDS, integrality=np.ones(n),
                  bounds=Bounds(low, high),
                  constraints=[LinearConstraint(matrix, lo, hi)] if rows else [],
                  options={"mip_rel_gap": 0.0})
    if result.x is None and given is not None:
        return None
    if result.x is None:
        raise TexscopeError(f"the tuned plan has no solution ({result.message}): the tuning "
                            "measured no variant the registry's rules allow", graph.function)
    x = np.round(result.x).astype(int)
    storages = [Storage.TEXTURE if x[v] else Storage.BUFFER for v in s]
    reads = [[Storage.TEXTURE if x[r[group_of[(t.index, p)]]] else Storage.BUFFER
              for p in range(len(consumers.demands[t.index]))] for t in graph.tensors]
    kernels = []
    for use, operands, ys, variants in choices:
        positions = measured.document["kernels"][use.key]["positions"]
        picked = next(i for i, y in enumerate(ys) if x[y])
        kernels.append(KernelChoice(
            use.name, graph.tensors[operands[len(use.inputs)]].name,
            _label(variants[picked][0], positions), variants[picked][1],
            tuple((_label(t, positions), sec) for i, (t, sec) in enumerate(variants)
                  if i != picked)))
    return TunedPlan(tuple(storages), tuple(reads), tuple(kernels), tuple(uncovered),
                     float(np.dot(cost, x)))
