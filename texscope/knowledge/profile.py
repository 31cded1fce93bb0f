"""Cost profiles: the prices the optimal planner weighs, with where each came from.

A profile says what a copy between a buffer and a texture costs (per byte
and per launch) and, per kernel class, what reading its input from a texture
and writing its output to one save against buffers.  The target presets ship
default profiles (``texscope/knowledge/profiles/*.json``); ``texscope calibrate``
measures one on an OpenCL device.  docs/costs.md documents the file.

This module imports neither TVM nor pyopencl: ``texscope calibrate`` runs
where TVM is not installed.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Mapping
from pathlib import Path

import attrs

from ..errors import TexscopeError, read_json

FORMAT = "texscope-cost-profile"
VERSION = 1
DEFAULTS_DIR = Path(__file__).parent / "profiles"
# Which fields of a kernel class are prices (each a {"value", "source"} pair).
GAINS = ("read_gain", "write_gain")
# Prices a kernel class may leave out: a weight's read costs what a map's does.
OPTIONAL_GAINS = ("weight_read_gain",)
# A class split off another later: a profile that does not price it (one
# written before the split) prices it as the class it came from.
PRICED_AS: Mapping[str, str] = {"pointwise_conv": "packed_conv"}


@attrs.frozen
class Price:
    """One number of a profile and where it came from."""

    value: float
    source: str


@attrs.frozen
class KernelPrices:
    """What texture access saves for one kernel class, as a fraction of the
    bytes accessed, in bytes-copied equivalents (negative: what it costs).

    ``read_gain`` prices reading the class's input from a texture rather than
    a buffer; ``write_gain`` writing its output to one; ``weight_read_gain``,
    where given, reading a weight (a constant, or a parameter the function
    declares a weight) from one.  A weight is read alike by every thread of a
    kernel: a GPU that broadcasts a buffer load to them and makes each
    thread fetch its own texel prices the two reads apart.
    """

    read_gain: Price
    write_gain: Price
    weight_read_gain: Price | None = None


@attrs.frozen
class CostProfile:
    """Prices for the planner (see docs/costs.md for the file).

    Attributes
    ----------
    device : mapping
        The device it describes (name, platform, driver), or what the
        defaults stand for.
    copy_seconds_per_byte, copy_seconds_per_launch : Price
        A buffer<->texture copy's time: per byte moved and per copy.
    kernels : mapping of str to KernelPrices
        Per kernel class (the registry's ``cost_class``).
    origin : str
        The file it was read from, or ``"built-in"``.
    document : mapping
        The whole JSON document, measurements included.
    """

    device: Mapping = attrs.field(converter=dict, eq=False)
    copy_seconds_per_byte: Price
    copy_seconds_per_launch: Price
    kernels: Mapping[str, KernelPrices] = attrs.field(converter=dict)
    origin: str = "built-in"
    document: Mapping = attrs.field(factory=dict, converter=dict, eq=False, repr=False)

    @property
    def copy_launch_bytes(self) -> float:
        """A copy's launch, in bytes a copy moves in the same time."""
        return self.copy_seconds_per_launch.value / self.copy_seconds_per_byte.value

    @property
    def digest(self) -> str:
        """A digest of the numbers that decide plans, not of where they came
        from: two profiles of one digest plan every model alike."""
        def gains(prices: KernelPrices) -> list:
            weight = prices.weight_read_gain
            return [prices.read_gain.value, prices.write_gain.value,
                    None if weight is None else weight.value]

        numbers = {"copy": [self.copy_seconds_per_byte.value, self.copy_seconds_per_launch.value],
                   "kernels": {name: gains(p) for name, p in sorted(self.kernels.items())}}
        return hashlib.sha256(json.dumps(numbers, sort_keys=True).encode()).hexdigest()[:16]

    def seconds(self, nbytes: float) -> float:
        """The time a copy of ``nbytes`` would take, without its launch:
        plan costs in bytes convert to seconds by it."""
        return nbytes * self.copy_seconds_per_byte.value

    def prices(self, cost_class: str | None) -> KernelPrices | None:
        """``cost_class``'s prices, or those of the class it was split off
        (:data:`PRICED_AS`) where this profile does not price it."""
        found = self.kernels.get(cost_class)
        if found is None and cost_class in PRICED_AS:
            return self.kernels.get(PRICED_AS[cost_class])
        return found

    def read_gain(self, support, weight: bool = False) -> float:
        """What a texture read by ``support``'s kernel saves per byte read: its
        cost class's price (of a ``weight``, its weight price where the class
        has one), or the entry's own ``texture_gain`` when this profile does
        not price the class."""
        prices = self.prices(getattr(support, "cost_class", None))
        if prices is None:
            return support.texture_gain
        if weight and prices.weight_read_gain is not None:
            return prices.weight_read_gain.value
        return prices.read_gain.value

    def write_gain(self, support) -> float:
        """What a texture write by ``support``'s kernel saves per byte written
        (its entry's ``texture_write_gain`` when the class is not priced)."""
        prices = self.prices(getattr(support, "cost_class", None))
        return prices.write_gain.value if prices is not None else support.texture_write_gain

    def with_gains(self, read: float, write: float, source: str,
                   weight_read: float | None = None) -> "CostProfile":
        """This profile with every kernel class priced ``read`` / ``write``
        (a bench uses it to put every eligible tensor in a texture), a
        weight's read ``weight_read`` (by default ``read``)."""
        weight = read if weight_read is None else weight_read
        prices = KernelPrices(Price(read, source), Price(write, source), Price(weight, source))
        return attrs.evolve(self, kernels={name: prices for name in self.kernels},
                            origin=f"{self.origin} ({source})")

    def with_map_gains(self, read: float, write: float, source: str) -> "CostProfile":
        """This profile with every kernel class's map reads priced ``read``
        and its writes ``write``, each class's weight reads priced as they
        were (a bench's texture build: every eligible map in a texture, the
        weights where the device wants them)."""
        def forced(prices: KernelPrices) -> KernelPrices:
            weight = prices.weight_read_gain or prices.read_gain
            return KernelPrices(Price(read, source), Price(write, source), weight)

        kernels = {name: forced(prices) for name, prices in self.kernels.items()}
        return attrs.evolve(self, kernels=kernels, origin=f"{self.origin} ({source})")

    def describe(self) -> str:
        name = self.device.get("name", "?")

        def prices(v: KernelPrices) -> str:
            weight = (f" weight read {v.weight_read_gain.value:+.3g}"
                      if v.weight_read_gain is not None else "")
            return f"read {v.read_gain.value:+.3g}{weight} write {v.write_gain.value:+.3g}"

        return (f"{self.origin}: {name}; copy {self.copy_seconds_per_byte.value * 1e9:.3g} ns/byte "
                f"+ {self.copy_seconds_per_launch.value * 1e6:.3g} us/launch; "
                + ", ".join(f"{k} {prices(v)}" for k, v in sorted(self.kernels.items())))


# A gain that makes every eligible tensor a texture (or, negated, none): far
# above any copy's price, yet not so far that a large model's cut overflows.
EVERYWHERE = 10.0

# How much a tuned plan must beat the plan to beat (all-buffer, or a plan
# that beats all-buffer by its own margin), by its predicted time, to be kept, where the tuning file records no
# measurement spread to derive it from.
TUNING_MARGIN = Price(0.03, "zoo mobilenet_v2 on an NVIDIA H200 (docs/benchmarks.md, tuned "
                            "plans): predicted 0.5% faster than all-buffer, measured 8% slower; "
                            "the other eight models were predicted 6-24% faster and were")

# How far a tuning set's prices may stand from a model's own kernel times,
# as a fraction of the time of the kernels (and copies) by which a tuned
# plan differs from the extreme it is compared with: on top of the noise
# margin.  The set prices each kernel alone, with neighbours standing in for
# the model's; the model's times differ from them by a factor per model and
# per storage the set cannot see.
SET_TO_MODEL = Price(0.10, "19 models' tuned plans on an NVIDIA H200 (docs/benchmarks.md, all 19 "
                             "models re-tuned): a margin of 0-11% of their differing kernels' "
                             "time would have dropped the six that lost 4-9% to all-buffer "
                             "(iris_landmark 11%), 13-30% the five that won 10-20% (an earlier "
                             "hand_landmark_full plan, 0.88x, 11%); 10% drops five of the six "
                             "and keeps every winner")


def extreme_profiles(base: CostProfile) -> dict[str, CostProfile]:
    """``base`` pricing every eligible tensor into a texture, and into none:
    the profiles of the all-texture and all-buffer plans."""
    return {"all-texture": base.with_gains(EVERYWHERE, EVERYWHERE, "every eligible tensor a texture"),
            "all-buffer": base.with_gains(-EVERYWHERE, -EVERYWHERE, "no tensor a texture")}


def _price(value, where: str, positive: bool = False) -> Price:
    if not isinstance(value, Mapping) or set(value) - {"value", "source"} or "value" not in value:
        raise TexscopeError(f"{where}: expected {{\"value\": number, \"source\": text}}, "
                            f"got {value!r}")
    number, source = value["value"], value.get("source")
    if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number):
        raise TexscopeError(f"{where}: value {number!r} is not a finite number")
    if positive and number <= 0:
        raise TexscopeError(f"{where}: value {number!r} must be positive")
    if not isinstance(source, str) or not source.strip():
        raise TexscopeError(f"{where}: every number needs a \"source\" saying where it came from")
    return Price(float(number), source)


def from_document(document: Mapping, origin: str = "built-in") -> CostProfile:
    """Validate a profile document (the parsed JSON) and make a CostProfile.

    Raises
    ------
    TexscopeError
        Naming ``origin`` and the field at fault.
    """
    if not isinstance(document, Mapping) or document.get("format") != FORMAT:
        raise TexscopeError(f"{origin}: not a texscope cost profile (no \"format\": \"{FORMAT}\")")
    if document.get("version") != VERSION:
        raise TexscopeError(f"{origin}: profile version {document.get('version')!r}; "
                            f"this texscope reads version {VERSION}")
    device = document.get("device")
    if not isinstance(device, Mapping) or not isinstance(device.get("name"), str):
        raise TexscopeError(f"{origin}: \"device\" must be an object with a \"name\"")
    copy = document.get("copy")
    if not isinstance(copy, Mapping):
        raise TexscopeError(f"{origin}: \"copy\" must be an object")
    per_byte = _price(copy.get("seconds_per_byte"), f"{origin}: copy.seconds_per_byte", True)
    per_launch = _price(copy.get("seconds_per_launch"), f"{origin}: copy.seconds_per_launch")
    if per_launch.value < 0:
        raise TexscopeError(f"{origin}: copy.seconds_per_launch must not be negative")
    kernels = document.get("kernels")
    if not isinstance(kernels, Mapping):
        raise TexscopeError(f"{origin}: \"kernels\" must be an object of kernel classes")
    prices = {}
    for name, entry in kernels.items():
        if not isinstance(entry, Mapping):
            raise TexscopeError(f"{origin}: kernels.{name} must be an object")
        gains = {g: _price(entry.get(g), f"{origin}: kernels.{name}.{g}") for g in GAINS}
        gains.update({g: _price(entry[g], f"{origin}: kernels.{name}.{g}")
                      for g in OPTIONAL_GAINS if g in entry})
        prices[name] = KernelPrices(**gains)
    return CostProfile(device, per_byte, per_launch, prices, origin, document)


def load(path) -> CostProfile:
    """Read and validate a profile file."""
    return from_document(read_json(path, "cost profile"), str(Path(path)))


@functools.lru_cache(maxsize=None)
def default(name: str) -> CostProfile:
    """The profile a target preset ships (``texscope/knowledge/profiles/<name>.json``)."""
    path = DEFAULTS_DIR / f"{name}.json"
    if not path.exists():
        raise TexscopeError(f"no built-in cost profile {name!r}; there are "
                            f"{sorted(p.stem for p in DEFAULTS_DIR.glob('*.json'))}")
    return attrs.evolve(load(path), origin=f"built-in {name}")


def resolve(profile, fallback: str) -> CostProfile:
    """A CostProfile from a CostProfile, a path, a parsed document or None
    (the preset's built-in ``fallback``)."""
    if profile is None:
        return default(fallback)
    if isinstance(profile, CostProfile):
        return profile
    if isinstance(profile, Mapping):
        return from_document(profile, "the profile given")
    if isinstance(profile, (str, Path)):
        return load(profile)
    raise TexscopeError(f"a cost profile is a CostProfile, a file path or a parsed document, "
                        f"not {type(profile).__name__}")


def is_profile_file(path) -> bool:
    """Whether ``path`` holds a texscope cost profile (one texscope may overwrite)."""
    try:
        return json.loads(Path(path).read_text()).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False
