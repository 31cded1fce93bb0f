"""Kernel classes priced from texscope's own built kernels (no TVM needed).

``texscope calibrate --export-kernels DIR`` (where TVM is) builds, per kernel
class and shape, a small module (:mod:`texscope.models.calibration`) three
times, and writes each build's portable plan (plan.json, kernels.cl,
weights.npz) with a manifest, ``kernel-set.json``:

* ``buffer``: the class's operands all in buffers;
* ``image_in``: its inputs (data and weights) in textures, its output in a buffer;
* ``image_out``: its output in a texture, its inputs in buffers.

``texscope calibrate --kernels DIR`` replays the three plans on the device
and times the class's kernels (the launches of the bindings whose names
start with the manifest's ``measured_prefix``; the packing transforms and
copies around them are not counted).  A class's read gain is
``(t_buffer - t_image_in) / (bytes read from textures x copy seconds per byte)``
and its write gain likewise with ``image_out``, the median over shapes: the
same prices as the microbenchmarks give, measured on the kernels the
planner's plans run.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import numpy as np

from ..errors import TexscopeError
from .plan import KernelStep, TensorArg, read_plan
from .replay import random_inputs, replay

FORMAT = "texscope-kernel-set"
VERSION = 1
MANIFEST = "kernel-set.json"
# The gain given to the measured class, whose sign puts its operands where a
# variant wants them: far beyond any copy's price, so the planner obeys it.
# Every other class is priced 0 (no preference).
EXTREME = 1000.0
VARIANTS = {
    "buffer": (-EXTREME, -EXTREME),
    "image_in": (EXTREME, -EXTREME),
    "image_out": (-EXTREME, EXTREME),
}


def read_manifest(directory) -> dict:
    """The manifest of a kernel set, checked."""
    path = Path(directory) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise TexscopeError(f"{directory}: no {MANIFEST}; write one with "
                            "`texscope calibrate --export-kernels DIR`") from None
    except (OSError, ValueError) as err:
        raise TexscopeError(f"{path}: cannot read the kernel set ({err})") from None
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise TexscopeError(f"{path}: not a texscope kernel set (format {FORMAT!r}, "
                            f"version {VERSION})")
    if not isinstance(manifest.get("measured_prefix"), str) or not manifest["measured_prefix"]:
        raise TexscopeError(f"{path}: no measured_prefix naming the timed bindings")
    if not isinstance(manifest.get("cases"), list) or not manifest["cases"]:
        raise TexscopeError(f"{path}: no cases")
    for case in manifest["cases"]:
        if set(case.get("variants", {})) != set(VARIANTS):
            raise TexscopeError(f"{path}: case {case.get('name')!r} needs the variants "
                                f"{sorted(VARIANTS)}")
    return manifest


def tensor_bytes(spec) -> int:
    """A plan tensor's size in bytes."""
    return math.prod(spec.shape) * np.dtype(spec.dtype).itemsize


def texture_bytes(plan, prefix: str) -> int:
    """Bytes of textures the measured kernels (bindings named ``prefix...``)
    access: each texture operand once per binding (the planner prices each
    read and write once per call)."""
    seen = set()
    for step in plan.steps:
        if isinstance(step, KernelStep) and step.binding.startswith(prefix):
            seen.update((step.binding, arg.tensor) for arg in step.args
                        if isinstance(arg, TensorArg) and plan.spec(arg.tensor).is_texture)
    return sum(tensor_bytes(plan.spec(tensor)) for _, tensor in seen)


def measured_seconds(plan, prefix: str, device, repeats: int) -> float:
    """The measured kernels' (bindings named ``prefix...``) time in one run:
    per launch the least of ``repeats`` runs after a warm-up (other
    processes only ever add time), summed."""
    inputs = random_inputs(plan)
    replay(plan, inputs, device)  # warm-up: compile, first-touch
    runs = [replay(plan, inputs, device) for _ in range(repeats)]
    total = 0.0
    for index, command in enumerate(runs[0].times):
        if command.binding.startswith(prefix) and command.kernel != "to_vdevice":
            total += min(run.times[index].seconds for run in runs)
    return total


def _gain(buffer_s: float, texture_s: float, nbytes: int, per_byte: float) -> float:
    return (buffer_s - texture_s) / (nbytes * per_byte)


def measure(directory, device, repeats: int, per_byte: float, progress=None) -> dict:
    """Per kernel class in the set: read and write gains and their samples,
    as :func:`texscope.opencl.calibrate.measure_kernels` gives them."""
    root = Path(directory)
    manifest = read_manifest(root)
    prefix = manifest["measured_prefix"]
    by_class: dict[str, list] = {}
    for case in manifest["cases"]:
        sample = {"case": case["name"], "channels": case["channels"], "height": case["size"],
                  "width": case["size"]}
        for variant in VARIANTS:
            plan = read_plan(root / case["variants"][variant])
            sample[f"{variant}_s"] = measured_seconds(plan, prefix, device, repeats)
            sample[f"{variant}_texture_bytes"] = texture_bytes(plan, prefix)
            if progress is not None:
                progress.step(f"{case['name']} {variant}")
        by_class.setdefault(case["cost_class"], []).append(sample)
    kernels = {}
    for cost_class, samples in by_class.items():
        shapes = ", ".join(f"{s['channels']}x{s['height']}x{s['width']}" for s in samples)
        how = (f"measured by texscope calibrate --kernels on texscope's own built kernels "
               f"({manifest.get('created_by', 'texscope')}): median over {shapes} of (time with "
               f"buffers - time with")
        gains = {}
        for field, variant, what in (("read_gain", "image_in", "its inputs in textures"),
                                     ("write_gain", "image_out", "its output in a texture")):
            values = [_gain(s["buffer_s"], s[f"{variant}_s"], s[f"{variant}_texture_bytes"],
                            per_byte) for s in samples if s[f"{variant}_texture_bytes"]]
            gains[field] = (
                {"value": statistics.median(values),
                 "source": f"{how} {what}) / (texture bytes x copy seconds per byte)"}
                if values else
                {"value": 0.0, "source": f"not measured: no build of the set put {what} "
                                         "(the registry allows no texture there)"})
        kernels[cost_class] = {**gains, "samples": samples}
    return kernels


def steps(directory) -> int:
    """How many timed builds :func:`measure` runs (for the progress bar)."""
    return len(read_manifest(directory)["cases"]) * len(VARIANTS)
