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

The same program, its storages fixed to the all-buffer and all-texture
plans, prices those; the optimum is kept only where it beats the better of
them by more than the measurements' noise (:func:`_verdict`).

A set times each kernel alone; in the model another kernel ran just before
it and other data sits in the caches, and the two differ by a factor per
model and per storage (on an H200, iris_landmark's buffer kernels ran 0.86x
their set prices in the model, its texture kernels 1.28x).  Where the tuning
file times the model's own all-buffer and all-texture programs whole
(``in_place``), every price is scaled by the factor of its storage class,
buffer-only kernels by ``f_buffer`` and kernels with a texture operand (and
copies) by ``f_texture``, the two solving "the extremes cost what they
measured" (:func:`in_place_scale`); the optimum is then that of the scaled
prices, and the extremes are weighed at their measured times.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping

import attrs
import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from ..errors import TexscopeError
from ..knowledge.profile import SET_TO_MODEL, TUNING_MARGIN
from ..knowledge.registry import Storage
from ..knowledge.targets import is_texture_scope
from . import cost as plan_cost

# Combinations of operand tensors a fused call's name is looked up under.
MOST_READINGS = 64

# The plan an earlier tuning file chose and the plan of the target's cost
# profile, as the file names their runs whole (texscope.opencl.tuning's
# PREVIOUS and DEFAULT: that layer is below this one's reach).  Each is
# weighed at its measured time, never at its prices.
PREVIOUS = "previous"
DEFAULT = "default"
DEFAULT_PROFILE = "default_profile"  # the digest of the cost profile that chose it
MEASURED_WHOLE = (PREVIOUS, DEFAULT)

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
        return [(textures, seconds) for textures, seconds, _ in self.spread_variants(key)]

    def spread_variants(self, key: str):
        """:meth:`variants` with each one's spread: (fastest, slowest) run
        in seconds, the median twice where the file records none."""
        kernel = self.document["kernels"].get(key)
        if kernel is None:
            return []
        return [(tuple(is_texture_scope(s) for s in v["scopes"]), float(v["seconds"]), _spread(v))
                for v in kernel["variants"]]

    def copy_seconds(self, shape, dtype: str, to_texture: bool) -> float | None:
        copy = self.copy(shape, dtype, to_texture)
        return None if copy is None else float(copy["seconds"])

    def copy(self, shape, dtype: str, to_texture: bool) -> Mapping | None:
        """The measured copy of this shape and direction (None: not measured)."""
        for copy in self.document["copies"]:
            if list(copy["shape"]) == list(shape) and copy["dtype"] == dtype \
                    and is_texture_scope(copy["target"]) == to_texture:
                return copy
        return None

    def in_place(self, function: str) -> Mapping | None:
        """The model's all-buffer and all-texture programs timed whole, where
        the file records them for ``function``."""
        timed = self.document.get("in_place")
        return timed if timed is not None and timed.get("function") == function else None

    @property
    def previous(self) -> "MeasuredCosts | None":
        """The tuning file that chose the plan this one ran whole as
        ``previous`` (``texscope tune --tuning``), over the same kernels."""
        earlier = self.document.get("previous_tuning")
        if earlier is None:
            return None
        if (earlier["model_fingerprint"], earlier["target"]) != \
                (self.document["model_fingerprint"], self.document["target"]):
            raise TexscopeError(f"{self.origin}: its previous_tuning was measured for another "
                                "model or target")
        return MeasuredCosts(earlier, self.uses, self.aliases, f"{self.origin}: previous_tuning")

    @property
    def records_spread(self) -> bool:
        """Whether every variant and copy has its fastest and slowest run
        (``python -m texscope.opencl.tune`` writes them; older files do not)."""
        entries = [*(v for k in self.document["kernels"].values() for v in k["variants"]),
                   *self.document["copies"]]
        return bool(entries) and all(SPREAD[0] in e and SPREAD[1] in e for e in entries)


SPREAD = ("min_seconds", "max_seconds")
SPREAD_RUNS = 3  # fewer runs say nothing of the noise (one run: no spread at all)


def _spread(entry: Mapping) -> tuple[float, float]:
    median = float(entry["seconds"])
    return float(entry.get(SPREAD[0], median)), float(entry.get(SPREAD[1], median))


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
    verdict: "Verdict | None" = None  # against the simple plans, where they were given
    scale: "InPlaceScale | None" = None  # the prices' scaling to the model's own runs


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
        self.taken: set[int] = set()  # tensors a name "=..." was resolved to
        self.claims: dict[str, list[int]] = {}  # a name "=...": its tensors, in order
        self.option_cache: dict[str, tuple[int, ...]] = {}
        self.output_rank: dict[str, int] = {}
        # The j-th alias (in the order FuseOps made the groups) of a name
        # denotes the j-th tensor of that name.
        self.alias_rank: dict[str, int] = {}
        counts: dict[str, int] = {}
        for token, target in self.aliases.items():
            self.alias_rank[token] = counts.get(target, 0)
            counts[target] = self.alias_rank[token] + 1

    def __getitem__(self, name: str) -> int | None:
        if name in self.aliases:
            target = self.aliases[name]
            return self._claim(target, self.alias_rank[name]) if target.startswith("=") \
                else self[target]
        if name.startswith("="):
            return self._claim(name, 0)
        return (self._options(name) or (None,))[0]

    def output(self, name: str) -> int | None:
        """The tensor a kernel's output ``name`` denotes.  Two kernels may
        compute alike from alike operands (the two branches of a block, their
        weights unnamed): the j-th kernel whose output has this name gets the
        j-th tensor of that description, in the model's order, as the j-th
        alias of the name does."""
        if not name.startswith("="):
            return self[name]
        rank = self.output_rank.get(name, 0)
        self.output_rank[name] = rank + 1
        return self._claim(name, rank)

    def _claim(self, name: str, rank: int) -> int | None:
        """The ``rank``-th tensor ``name`` denotes, each claimed once."""
        claimed = self.claims.setdefault(name, [])
        for tensor in self._options(name):
            if len(claimed) > rank:
                break
            if tensor not in self.taken:
                claimed.append(tensor)
                self.taken.add(tensor)
        return claimed[rank] if len(claimed) > rank else None

    def _reads(self, operands) -> tuple:
        # Constants are read as "?": a fused group names none of them.
        return tuple("?" if self.graph.tensors[t].origin == "constant" else t
                     for t in operands if t is not None)

    def _options(self, name: str) -> tuple[int, ...]:
        """Every tensor ``name`` may denote, the likeliest first.  A call's
        operands may each denote several tensors (two convs of one input
        and one shape, their weights unnamed): the call is looked for among
        the readers of every combination, so a name is resolved by what
        reads it, not by a first guess (the second branch of iris_landmark's
        blocks went unfound, and every kernel after it)."""
        if name in self.option_cache:
            return self.option_cache[name]
        found: tuple[int, ...] = ()
        if name in self.aliases:
            found = tuple(t for t in (self[name],) if t is not None)
        elif name in self.by_name:
            found = (self.by_name[name],)
        elif name.endswith("]") and "[" in name:
            base, index = name[:name.rindex("[")], int(name[name.rindex("[") + 1:-1])
            if base.startswith("=") and base.endswith(")"):
                found = tuple(self.graph.producer(first)[0].outputs[index]
                              for first in self._options(base)
                              if first in self.graph.producers
                              and index < len(self.graph.producer(first)[0].outputs))
        elif name.startswith("=") and name.endswith(")"):
            found = self._sites(name)
        self.option_cache[name] = found
        return found

    def _sites(self, name: str) -> tuple[int, ...]:
        start = name.index("(")
        shape, _, callee = name[1:start].partition(":")
        choices = [("?",) if p == "?" else self._options(p) for p in _split(name[start + 1:-1])]
        if not all(choices) or math.prod(map(len, choices)) > MOST_READINGS:
            return ()
        candidates = [site for reads in itertools.product(*choices)
                      for site in self.by_reads.get(reads, ())
                      if site.outputs and _shape(self.graph.tensors[site.outputs[0]]) == shape]
        # Calls reading the same tensors alike (a maximum and a minimum of
        # one tensor): the one whose registry entry the fused kernel names first.
        named = [site for site in candidates if site.support.name.split("_")[0] in callee]
        others = [site for site in candidates if site not in named]
        return tuple(dict.fromkeys(site.outputs[0] for site in named + others))


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
    tensors = [None if n == "?" else names[n] for n in use.inputs]
    tensors += [None if n == "?" else names.output(n) for n in use.outputs]
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
         sync_pairs, given=None, extremes=None) -> TunedPlan | None:
    """The storages of least measured time (see the module docstring).

    ``group_of`` maps (tensor, demand position) to its demand group (an
    int), ``allowed_of(t)`` is a tensor's writable storages, ``sync_pairs``
    (kinds, a, b) are variables forced equal (kinds ``"rs"``: group ``a``
    reads what tensor ``b`` is written as; ``"ss"``: two tensors written alike).
    ``given`` (storages, reads per tensor), a plan made otherwise, fixes
    every storage: the result then prices that plan by the same measured
    costs (None where it uses a variant the tuning never measured).
    ``extremes`` (label: (storages, reads)), the all-buffer and all-texture
    plans as the build makes them, and the ``"default"`` plan of the
    target's cost profile: the optimum is kept only where it beats the
    fastest of them by more than the margin (:func:`_verdict`), else that
    plan is returned; the result's ``verdict`` says which and why.  The
    default plan is weighed only where the file ran it whole.
    """
    graph = consumers.graph
    per_byte = profile.copy_seconds_per_byte.value
    launch_s = profile.copy_seconds_per_launch.value
    cost: list[float] = []
    spread: dict[int, tuple[float, float]] = {}  # measured costs' (fastest, slowest) runs

    def var(c=0.0):
        cost.append(c)
        return len(cost) - 1

    s = [var() for _ in graph.tensors]
    r = {g: var() for g in sorted(set(group_of.values()))}
    tex_copy = [var() for _ in graph.tensors]
    buf_copy = [var() for _ in graph.tensors]
    texture_columns = set(tex_copy) | set(buf_copy)  # what f_texture scales
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
            copy = measured.copy(tensor.shape, tensor.dtype, to_texture) \
                if tensor.shape is not None else None
            cost[column[tensor.index]] = float(copy["seconds"]) if copy is not None else \
                tensor.nbytes * per_byte + launch_s
            if copy is not None:
                spread[column[tensor.index]] = _spread(copy)
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
        measured_variants = measured.spread_variants(use.key)
        variants = [(textures, seconds) for textures, seconds, _ in measured_variants]
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
        spread.update((y, runs) for y, (_, _, runs) in zip(ys, measured_variants))
        texture_columns.update(y for y, (textures, _) in zip(ys, variants) if any(textures))
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

    n = len(cost)
    matrix = np.zeros((len(rows), n))
    for i, coeffs in enumerate(rows):
        for j, c in coeffs.items():
            matrix[i, j] += c
    constraints = [LinearConstraint(matrix, lo, hi)] if rows else []

    def fixing(assignment) -> dict[int, int]:
        storages_given, reads_given = _folded(graph, consumers, assignment, allowed_of)
        values = dict(fixed)
        for tensor, storage in enumerate(storages_given):
            values[s[tensor]] = int(storage is Storage.TEXTURE)
        for (tensor, position), group in group_of.items():
            values[r[group]] = int(reads_given[tensor][position] is Storage.TEXTURE)
        return values

    def solve(values: dict[int, int]):
        low, high = np.zeros(n), np.ones(n)  # the 0-1 bounds, not the spread
        for j, value in values.items():
            low[j] = high[j] = value
        result = milp(np.array(cost) * MICROSECONDS, integrality=np.ones(n),
                      bounds=Bounds(low, high), constraints=constraints,
                      options={"mip_rel_gap": 0.0})
        return None if result.x is None else np.round(result.x).astype(int)

    def tuned_plan(x) -> TunedPlan:
        storages = [Storage.TEXTURE if x[v] else Storage.BUFFER for v in s]
        reads = [[Storage.TEXTURE if x[r[group_of[(t.index, p)]]] else Storage.BUFFER
                  for p in range(len(consumers.demands[t.index]))] for t in graph.tensors]
        kernels = []
        for use, operands, ys, variants in choices:
            positions = measured.document["kernels"][use.key]["positions"]
            picked = next(i for i, y in enumerate(ys) if x[y])
            kernels.append(KernelChoice(  # at the prices weighed: scaled, where they were
                use.name, graph.tensors[operands[len(use.inputs)]].name,
                _label(variants[picked][0], positions), float(cost[ys[picked]]),
                tuple((_label(t, positions), float(cost[y])) for i, ((t, _), y)
                      in enumerate(zip(variants, ys)) if i != picked)))
        return TunedPlan(tuple(storages), tuple(reads), tuple(kernels), tuple(uncovered),
                         float(np.dot(cost, x)))

    scale, priced = None, {}
    if extremes:
        # Fixed storages fix the solution: scaling the prices leaves these as they are.
        priced = {label: solve(fixing(assignment)) for label, assignment in extremes.items()
                  if label != DEFAULT}
        texture_mask = np.isin(np.arange(n), sorted(texture_columns))
        scale = in_place_scale(measured.in_place(graph.function), cost, texture_mask, priced,
                               uncovered)
        if scale.applies:
            factor = np.where(texture_mask, scale.texture, scale.buffer)
            cost = list(np.array(cost) * factor)
            spread = {j: (a * factor[j], b * factor[j]) for j, (a, b) in spread.items()}
    if given is not None:
        x = solve(fixing(given))
        return None if x is None else attrs.evolve(tuned_plan(x), scale=scale)
    best = solve(fixed)
    if best is None:
        raise TexscopeError("the tuned plan has no solution: the tuning measured no variant "
                            "the registry's rules allow", graph.function)
    if not extremes:
        return tuned_plan(best)
    earlier_costs = measured.previous if scale.seconds(PREVIOUS) is not None else None
    if earlier_costs is not None:
        # The plan the earlier file chose, recomputed as its build did.
        earlier = plan(consumers, earlier_costs, profile, group_of, allowed_of, sync_pairs,
                       extremes=extremes)
        priced[PREVIOUS] = solve(fixing((earlier.storages, earlier.reads)))
    aside = ""
    if DEFAULT in extremes and scale.seconds(DEFAULT) is not None:
        if measured.in_place(graph.function).get(DEFAULT_PROFILE) == profile.digest:
            priced[DEFAULT] = solve(fixing(extremes[DEFAULT]))
        else:
            aside = ("; the default plan run whole is not weighed: the tuning set's was chosen "
                     "by another cost profile")
    low = np.array([spread.get(j, (c, c))[0] for j, c in enumerate(cost)])
    high = np.array([spread.get(j, (c, c))[1] for j, c in enumerate(cost)])
    verdict = _verdict(measured, np.array(cost), low, high, best, priced, scale)
    verdict = attrs.evolve(verdict, margin_source=verdict.margin_source + aside)
    x = best if verdict.kept == "tuned" else priced[verdict.kept]
    return attrs.evolve(tuned_plan(x), verdict=verdict, scale=scale)


def _folded(graph, consumers, assignment, allowed_of):
    """``assignment`` (storages, reads per tensor) as the build runs it: a
    texture every reader of which reads a buffer (through a copy) is written
    as a buffer, where its producer may write one
    (:class:`texscope.cleanup.FoldTextureCopies`).  The all-texture plan of
    selfie_segmentation_landscape writes such a texture, a variant of its
    kernel no set builds (the build never runs it)."""
    storages, reads = assignment
    storages = list(storages)
    for tensor in graph.tensors:
        demands = consumers.demands[tensor.index]
        if storages[tensor.index] is Storage.TEXTURE and demands \
                and all(d.call is not None for d in demands) \
                and all(read is Storage.BUFFER for read in reads[tensor.index]) \
                and tensor.index in graph.producers and Storage.BUFFER in allowed_of(tensor):
            storages[tensor.index] = Storage.BUFFER
    return storages, reads


@attrs.frozen
class InPlaceScale:
    """How the set's prices were scaled to the model's own runs.

    ``buffer``, ``texture``: the factors (1.0 where not ``applies``);
    ``measured``: (label, (median, fastest, slowest) seconds) of the
    extremes run whole; ``note``: why nothing was scaled, where not."""

    applies: bool
    buffer: float = 1.0
    texture: float = 1.0
    measured: tuple = ()
    note: str = ""

    def seconds(self, label: str) -> float | None:
        """The median time of program ``label`` run whole (None: not run)."""
        return dict(self.measured).get(label, (None,))[0]

    def spread(self, label: str) -> float:
        """How far program ``label``'s runs whole stray from their median."""
        median, fastest, slowest = dict(self.measured)[label]
        return max(median - fastest, slowest - median)

    def describe(self) -> str:
        if not self.applies:
            return self.note
        runs = ", ".join(f"{label} {median * 1e3:.3f} ms"
                         for label, (median, _, _) in self.measured)
        return (f"prices scaled to the model's own programs run whole ({runs}): buffer kernels "
                f"x{self.buffer:.3f}, kernels with a texture operand and copies "
                f"x{self.texture:.3f}")


def in_place_scale(in_place, cost, texture_mask, priced, uncovered) -> InPlaceScale:
    """The factors ``f_buffer`` (columns outside ``texture_mask``) and
    ``f_texture`` (inside) that make the extremes ``priced`` (label:
    solution) cost what ``in_place`` measured them at: two equations,
    measured = f_buffer * (its buffer-only part) + f_texture * (its texture
    part), one per extreme.  Where all-texture has no texture part (nothing
    may be a texture) one factor scales both.  Not applied where the file
    runs no program whole, where calls are priced by the cost profile (their
    prices are gains, not times) or where the factors come out non-positive."""
    if in_place is None:
        return InPlaceScale(False, note="the tuning file runs none of the model's programs whole")
    if uncovered:
        return InPlaceScale(False, note=f"not scaled to the model's own runs: {len(uncovered)} "
                                        f"calls priced by the cost profile")
    labels = ("all-buffer", "all-texture")
    if any(priced.get(label) is None for label in labels):
        return InPlaceScale(False, note="not scaled to the model's own runs: an extreme the "
                                        "tuning cannot price")
    cost = np.asarray(cost, dtype=float)
    measured = tuple((label, tuple(float(in_place[label][k]) for k in
                                   ("seconds", "min_seconds", "max_seconds")))
                     for label in (*labels, *MEASURED_WHOLE) if label in in_place)
    parts = np.array([[float(np.dot(cost * ~texture_mask, priced[label])),
                       float(np.dot(cost * texture_mask, priced[label]))] for label in labels])
    times = np.array([dict(measured)[label][0] for label in labels])
    if abs(np.linalg.det(parts)) <= 1e-12 * float(np.abs(parts).max() ** 2 or 1.0):
        factors = np.full(2, times.sum() / parts.sum())
    else:
        factors = np.linalg.solve(parts, times)
    if not np.all(np.isfinite(factors)) or np.any(factors <= 0):
        return InPlaceScale(False, note=f"not scaled to the model's own runs: factors "
                                        f"{factors[0]:.3f} (buffers), {factors[1]:.3f} "
                                        f"(textures) are no scale")
    return InPlaceScale(True, float(factors[0]), float(factors[1]), measured)


def _verdict(measured: MeasuredCosts, cost, low, high, best, priced,
             scale: InPlaceScale | None = None) -> "Verdict":
    """Keep the optimum ``best`` only where it beats the reference plan
    of ``priced`` (label: solution, None where not priced) by more than
    :func:`_margin`.  The reference is the fastest plan that beats
    all-buffer by its own margin, else all-buffer: a plan with textures
    stands only where it wins by more than the prices may be off (zoo
    inception on an H200: all-texture predicted 5% under all-buffer ran
    1.20x it, docs/benchmarks.md).  The plans run whole beside the extremes
    (:data:`MEASURED_WHOLE`: the one an earlier tuning file chose, the
    default plan of the target's profile) stand at their measured times,
    their margin the two plans' spreads run whole; where ``best`` is one of
    them, its measured time stands for it (zoo/chain64 on an H200: the
    default plan ran 0.83x all-buffer in every replay while its prices
    said 0.975x, docs/benchmarks.md)."""
    scaled_to = scale if scale is not None and scale.applies else None
    times = tuple((label, None if x is None else
                   scaled_to.seconds(label) if label in MEASURED_WHOLE else float(np.dot(cost, x)))
                  for label, x in priced.items())
    seconds = dict(times)
    whole = next((label for label in MEASURED_WHOLE
                  if priced.get(label) is not None and (priced[label] == best).all()), None)
    tuned_s = seconds[whole] if whole else float(np.dot(cost, best))
    candidates = [label for label, sec in times if sec is not None]
    scaled = f"; {scale.describe()}" if scaled_to else ""
    if not candidates:
        return Verdict("tuned", tuned_s, times, 0.0, "neither extreme is a plan the tuning priced")

    def whole_margin(label: str, other: str) -> tuple[float, str]:
        spreads = [scaled_to.spread(label), scaled_to.spread(other)]
        return math.hypot(*spreads), (f"the optimum is the {label} plan, measured whole: its "
                                      f"spread {spreads[0] * 1e3:.3f} ms and {other}'s "
                                      f"{spreads[1] * 1e3:.3f} ms as independent errors")

    label, note = min(candidates, key=lambda c: seconds[c]), ""
    if label != "all-buffer" and seconds.get("all-buffer") is not None:
        standing = [c for c in sorted(candidates, key=lambda c: seconds[c])
                    if seconds[c] < seconds["all-buffer"]]
        for candidate in standing:
            if candidate in MEASURED_WHOLE:
                own_margin, _ = whole_margin(candidate, "all-buffer")
            else:
                own_margin, _ = _margin(measured, cost, low, high, priced[candidate],
                                        priced["all-buffer"], "all-buffer", scale)
            if seconds[candidate] + own_margin < seconds["all-buffer"]:
                label = candidate
                break
            note += (f" ({candidate} within its margin {own_margin * 1e3:.3f} ms of "
                     f"all-buffer: not the reference)")
        else:
            label = "all-buffer"
    extreme = priced[label]
    if (extreme == best).all():
        return Verdict("tuned", tuned_s, times, 0.0,
                       f"the optimum is the {label} plan itself{scaled}", label, note)
    if whole:
        margin_s, source = whole_margin(whole, label)
    else:
        margin_s, source = _margin(measured, cost, low, high, best, extreme, label, scale)
    kept = "tuned" if tuned_s + margin_s < seconds[label] else label
    return Verdict(kept, tuned_s, times, margin_s, source + scaled, label, note)


def _margin(measured: MeasuredCosts, cost, low, high, plan, extreme, label: str,
            scale: InPlaceScale | None = None):
    """(seconds, where they come from): by how much ``plan`` must beat the
    extreme ``label`` (solutions).  The spread of the measurements where the
    two differ when the file records it (``plan``'s kernels and copies at
    their slowest runs, the extreme's at their fastest, added as independent
    errors: the root of the sum of squares), else :data:`TUNING_MARGIN` of
    the extreme's time; then, where the prices were scaled to the model's
    own runs (``scale``), the extreme's spread run whole, as one more
    independent error; else :data:`SET_TO_MODEL` of the time of ``plan``'s
    kernels and copies that differ.  Added outright, the spreads grew with
    the kernels that differ: zoo/chain64's optimum, 13% under all-buffer by
    its H200 tuning file, met a margin of 17% over its 130 differing kernels
    and was dropped for all-buffer, which ran 1.12-1.21x the default plan
    close to it in four replays (docs/benchmarks.md)."""
    repeats = measured.document.get("repeats")
    only_plan, only_extreme = (plan == 1) & (extreme == 0), (extreme == 1) & (plan == 0)
    if measured.records_spread and isinstance(repeats, int) and repeats >= SPREAD_RUNS:
        margin_s = math.sqrt(float(np.dot((high - cost) ** 2, only_plan)
                                   + np.dot((cost - low) ** 2, only_extreme)))
        source = (f"the tuning file's spread over {repeats} runs: the tuned plan's kernels and "
                  f"copies that differ from {label}'s at their slowest, {label}'s at their "
                  f"fastest, as independent errors (root of the sum of squares)")
    else:
        margin_s = TUNING_MARGIN.value * abs(float(np.dot(cost, extreme)))
        why = ("records no measurement spread" if not measured.records_spread else
               f"measured {repeats} run(s), too few for a spread (at least {SPREAD_RUNS})")
        source = f"the default {TUNING_MARGIN.value:.0%} of {label}'s time: the tuning file {why}"
    if scale is not None and scale.applies:
        whole_s = scale.spread(label)
        margin_s = math.sqrt(margin_s ** 2 + whole_s ** 2)
        source += f"; and {label}'s own spread run whole, {whole_s * 1e3:.3f} ms, likewise"
        return margin_s, source
    differing_s = float(np.dot(cost, only_plan))
    margin_s += SET_TO_MODEL.value * differing_s
    source += (f"; plus {SET_TO_MODEL.value:.0%} of the {differing_s * 1e3:.3f} ms of the tuned "
               f"plan's kernels and copies that differ: how far a set's prices may stand from "
               f"the model's (docs/tuning.md)"
               + (f"; {scale.note}" if scale is not None and scale.note else ""))
    return margin_s, source


@attrs.frozen
class Verdict:
    """Whether the measured optimum was kept against the simple choices.

    ``kept``: ``"tuned"`` or the plan kept instead (``"all-buffer"``,
    ``"all-texture"``, or one run whole: ``"default"``, ``"previous"``);
    ``tuned_s``: the optimum's predicted time (its measured one where it is
    a plan run whole);
    ``extremes``: (label, predicted seconds, None where the tuning cannot
    price it); ``margin_s`` and ``margin_source``: by how much the optimum
    had to be faster, and where that came from; ``against``: the
    reference extreme, compared with; ``note``: why it is not the faster
    by prediction, where it is not.
    """

    kept: str
    tuned_s: float
    extremes: tuple[tuple[str, float | None], ...]
    margin_s: float
    margin_source: str
    against: str = ""
    note: str = ""

    @property
    def reason(self) -> str:
        times = {label: seconds for label, seconds in self.extremes}
        if not self.against:
            return f"tuned plan kept: {self.margin_source}"
        head = (f"tuned plan predicted {self.tuned_s * 1e3:.3f} ms, {self.against} "
                f"{times[self.against] * 1e3:.3f} ms{self.note}")
        others = "".join(f"; {label} {'not priced' if sec is None else f'{sec * 1e3:.3f} ms'}"
                         for label, sec in self.extremes if label != self.against)
        if self.margin_s == 0.0 and self.kept == "tuned" and "itself" in self.margin_source:
            return f"{head}: {self.margin_source}, tuned plan kept{others}"
        margin = f"margin {self.margin_s * 1e3:.3f} ms ({self.margin_source})"
        if self.kept == "tuned":
            return f"{head}: faster by more than the {margin}, tuned plan kept{others}"
        return f"{head}: within the {margin}, {self.kept} kept{others}"
