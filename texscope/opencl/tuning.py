"""Tuning sets and tuning files: a model's kernels timed in every storage (no TVM).

``texscope tune MODEL -o DIR`` writes a *tuning set* (DIR/``tuning-set.json``
and the program in DIR/``program/``, see
:mod:`texscope.backend.tuning.tuning_set`); ``python -m texscope.opencl.tune DIR -o
tuning.json`` times it on a device and writes a *tuning file*:

``format``/``version``; ``model``, ``model_fingerprint``, ``target``: what it
was measured for (``texscope build --tuning`` refuses it for anything else);
``device``: name, platform, driver; ``repeats``: runs per median;
``kernels``: per kernel key (a digest of the kernel with its storages left
out) its ``name``, operand ``positions`` (``in0``..., ``out0``...) and
``variants``, each ``{"scopes": [one per position], "seconds": median}``;
``copies``: ``{"shape", "dtype", "source", "target", "seconds"}``, one per
copy size and direction a plan could need.  Each variant and copy may also
give ``min_seconds`` and ``max_seconds``, its fastest and slowest run (the
spread the tuned planner's guard weighs; files without them still read).
``in_place`` (optional): the model's own all-buffer and all-texture programs
run whole on the device, ``{"function": name, "all-buffer": timed,
"all-texture": timed}``: the planner scales the set's prices to them
(:mod:`texscope.planner.tuned`).  A set made with an earlier tuning file
(``texscope tune --tuning``) also runs the plan that file chose
(``"previous": timed``) and carries that file (``previous_tuning``), so that
the planner can recompute that plan and weigh it at its measured time.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..errors import TexscopeError, read_json

SET_FORMAT = "texscope-tuning-set"
FORMAT = "texscope-tuning"
VERSION = 1
SET_MANIFEST = "tuning-set.json"
PROGRAM = "program"
# The untimed neighbours' OpenCL (texscope.opencl.neighbours.SOURCE), beside
# the program, for tuners that are not this package (texscope-run --tune).
NEIGHBOURS = "neighbours.cl"
# The model's own programs beside the set (the all-buffer and all-texture
# plans as the build makes them), run whole by the tuner: DIR/in-place/<label>.
IN_PLACE = "in-place"
IN_PLACE_LABELS = ("all-buffer", "all-texture")
# The plan an earlier tuning file chose, run whole beside them where given.
PREVIOUS = "previous"
# The plan the target's cost profile chooses (the build without a tuning
# file), run whole beside them where no other of the set's programs is it.
DEFAULT = "default"
# The digest of the cost profile that chose it (CostProfile.digest).
DEFAULT_PROFILE = "default_profile"


def read_set(directory) -> dict:
    """The manifest of a tuning set, checked."""
    path = Path(directory) / SET_MANIFEST
    manifest = read_json(path, "tuning set (write one with `texscope tune MODEL -o DIR`)")
    if not isinstance(manifest, dict) or manifest.get("format") != SET_FORMAT \
            or manifest.get("version") != VERSION:
        raise TexscopeError(f"{path}: not a texscope tuning set (format {SET_FORMAT!r}, "
                            f"version {VERSION})")
    for field in ("model", "model_fingerprint", "target", "kernels", "variants", "copies"):
        if field not in manifest:
            raise TexscopeError(f"{path}: no {field!r}")
    for variant in manifest["variants"]:
        if variant.get("kernel") not in manifest["kernels"]:
            raise TexscopeError(f"{path}: variant {variant.get('binding')!r} names no kernel "
                                "of the set")
        if not isinstance(variant.get("weights"), list):
            # Tuners leave the weights alone (texscope.opencl.neighbours).
            raise TexscopeError(f"{directory}: its variants name no weights (a set written by "
                                "an older texscope): write it again with "
                                "`texscope tune MODEL -o DIR`")
    in_place = manifest.get("in_place")
    if in_place is not None:
        in_place = in_place if isinstance(in_place, dict) else {}
        programs = in_place.get("programs")
        if not isinstance(in_place.get("function"), str) or not isinstance(programs, dict) \
                or set(programs) - {PREVIOUS, DEFAULT} != set(IN_PLACE_LABELS) \
                or not all(isinstance(folder, str) for folder in programs.values()):
            raise TexscopeError(f"{path}: \"in_place\" must name a function and a program "
                                f"folder for each of {', '.join(IN_PLACE_LABELS)}")
        if (PREVIOUS in programs) != ("previous_tuning" in manifest):
            raise TexscopeError(f"{path}: a \"previous\" program goes with the "
                                "\"previous_tuning\" that chose it")
        if (DEFAULT in programs) != isinstance(in_place.get(DEFAULT_PROFILE), str):
            raise TexscopeError(f"{path}: a \"default\" program goes with the "
                                f"\"{DEFAULT_PROFILE}\" that chose it")
        if PREVIOUS in programs:
            check_tuning(manifest["previous_tuning"], f"{path}: previous_tuning")
    return manifest


def _seconds(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value < 0:
        raise TexscopeError(f"{where}: seconds {value!r} is not a time")
    return float(value)


def check_tuning(document, origin: str) -> dict:
    """A parsed tuning file, checked; raises TexscopeError naming ``origin``
    and the field at fault."""
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise TexscopeError(f"{origin}: not a texscope tuning file (no \"format\": \"{FORMAT}\"); "
                            "write one with `python -m texscope.opencl.tune DIR -o FILE`")
    if document.get("version") != VERSION:
        raise TexscopeError(f"{origin}: tuning version {document.get('version')!r}; "
                            f"this texscope reads version {VERSION}")
    for field in ("model", "model_fingerprint", "target"):
        if not isinstance(document.get(field), str):
            raise TexscopeError(f"{origin}: {field!r} must be text")
    if not isinstance(document.get("device"), dict) or \
            not isinstance(document["device"].get("name"), str):
        raise TexscopeError(f"{origin}: \"device\" must be an object with a \"name\"")
    kernels = document.get("kernels")
    if not isinstance(kernels, dict):
        raise TexscopeError(f"{origin}: \"kernels\" must be an object")
    for key, kernel in kernels.items():
        where = f"{origin}: kernels.{key}"
        positions = kernel.get("positions") if isinstance(kernel, dict) else None
        if not isinstance(positions, list) or not isinstance(kernel.get("variants"), list):
            raise TexscopeError(f"{where}: needs \"positions\" and \"variants\"")
        for variant in kernel["variants"]:
            if not isinstance(variant, dict) or len(variant.get("scopes", ())) != len(positions):
                raise TexscopeError(f"{where}: each variant needs one scope per position")
            _timed(variant, where)
    if not isinstance(document.get("copies"), list):
        raise TexscopeError(f"{origin}: \"copies\" must be a list")
    for copy in document["copies"]:
        if not isinstance(copy, dict):
            raise TexscopeError(f"{origin}: copies: each copy must be an object")
        _timed(copy, f"{origin}: copies")
    in_place = document.get("in_place")
    if in_place is not None:
        if not isinstance(in_place, dict) or not isinstance(in_place.get("function"), str) \
                or not all(isinstance(in_place.get(label), dict) for label in IN_PLACE_LABELS):
            raise TexscopeError(f"{origin}: \"in_place\" must name a function and time each "
                                f"of {', '.join(IN_PLACE_LABELS)}")
        for label in IN_PLACE_LABELS:
            _timed(in_place[label], f"{origin}: in_place.{label}")
        if (PREVIOUS in in_place) != ("previous_tuning" in document):
            raise TexscopeError(f"{origin}: in_place.previous goes with the \"previous_tuning\" "
                                "that chose it")
        if PREVIOUS in in_place:
            _timed(in_place[PREVIOUS], f"{origin}: in_place.previous")
            check_tuning(document["previous_tuning"], f"{origin}: previous_tuning")
        if (DEFAULT in in_place) != isinstance(in_place.get(DEFAULT_PROFILE), str):
            raise TexscopeError(f"{origin}: in_place.default goes with the "
                                f"\"{DEFAULT_PROFILE}\" that chose it")
        if DEFAULT in in_place:
            _timed(in_place[DEFAULT], f"{origin}: in_place.default")
    return document


def _timed(entry: dict, where: str) -> None:
    """``seconds`` and, where recorded (optional: older files lack them),
    ``min_seconds <= seconds <= max_seconds``."""
    if not isinstance(entry, dict):
        raise TexscopeError(f"{where}: must be an object with \"seconds\"")
    median = _seconds(entry.get("seconds"), where)
    if ("min_seconds" in entry) != ("max_seconds" in entry):
        raise TexscopeError(f"{where}: \"min_seconds\" and \"max_seconds\" go together")
    if "min_seconds" in entry:
        low = _seconds(entry["min_seconds"], where)
        high = _seconds(entry["max_seconds"], where)
        if not low <= median <= high:
            raise TexscopeError(f"{where}: min_seconds {low} <= seconds {median} <= max_seconds "
                                f"{high} does not hold")


def load(path) -> dict:
    """Read and check a tuning file."""
    path = Path(path)
    return check_tuning(read_json(path, "tuning file"), str(path))


def is_tuning_file(path) -> bool:
    """Whether ``path`` holds a tuning file (one texscope may overwrite)."""
    try:
        return json.loads(Path(path).read_text()).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False
