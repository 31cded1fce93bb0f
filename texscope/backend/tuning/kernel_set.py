"""Build the kernel set that ``texscope calibrate --kernels`` times (TVM needed).

Per kernel class and shape, the class's module
(:mod:`texscope.models.calibration`) is built three times, under profiles that
price only that class, so that the planner puts its operands in buffers, its
inputs in textures, or its output in a texture
(:data:`texscope.opencl.kernel_set.VARIANTS`).  Each build's portable plan
goes into its own folder; ``kernel-set.json`` lists them.
"""

from __future__ import annotations

import copy
import datetime
import json
from pathlib import Path

from ...errors import TexscopeError
from ...knowledge import profile as cost_profile
from ...knowledge.targets import texture_target
from ...models import calibration
from ...opencl import kernel_set
from ...opencl.executor import plan_of
from ..build import build

# (channels, size) of each module; every packed tensor at most 8192 texels
# wide in any texture flavour, so the set runs on devices with 8192-texel
# images (PoCL) as well as on the 16384 of the presets.
DEFAULT_SHAPES = ((16, 40), (32, 28), (64, 14))


def variant_profile(base: cost_profile.CostProfile, cost_class: str,
                    variant: str) -> cost_profile.CostProfile:
    """``base`` with ``cost_class`` priced as ``variant`` wants and every
    other class at 0 (no preference either way)."""
    read, write = kernel_set.VARIANTS[variant]
    document = copy.deepcopy(dict(base.document))
    source = f"texscope calibrate --export-kernels: the {variant} build of {cost_class}"
    for name in set(document["kernels"]) | {cost_class}:
        mine = name == cost_class
        document["kernels"][name] = {
            "read_gain": {"value": read if mine else 0.0, "source": source},
            "write_gain": {"value": write if mine else 0.0, "source": source},
        }
    return cost_profile.from_document(document, f"{cost_class} {variant}")


def export(directory, shapes=DEFAULT_SHAPES, target: str = "adreno-opencl",
           classes=None, log=print) -> Path:
    """Write the kernel set into ``directory`` (which must not exist yet, or
    be empty); returns the manifest's path."""
    root = Path(directory)
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise TexscopeError(f"{root} exists and is not an empty folder; not writing into it")
    classes = list(classes or calibration.MODULES)
    unknown = sorted(set(classes) - set(calibration.MODULES))
    if unknown:
        raise TexscopeError(f"no calibration module for {unknown}; there are "
                            f"{sorted(calibration.MODULES)}")
    base = texture_target(target).profile
    cases = []
    for cost_class in classes:
        for channels, size in shapes:
            name = f"{cost_class}-{channels}x{size}"
            mod = calibration.MODULES[cost_class](channels, size)
            variants = {}
            for variant in kernel_set.VARIANTS:
                folder = f"{name}/{variant}"
                result = build(mod, target, profile=variant_profile(base, cost_class, variant))
                (root / folder).mkdir(parents=True)
                plan_of(result).write(root / folder)
                variants[variant] = folder
            cases.append({"name": name, "cost_class": cost_class, "channels": channels,
                          "size": size, "variants": variants})
            log(f"  {name}: built")
    manifest = {
        "format": kernel_set.FORMAT,
        "version": kernel_set.VERSION,
        "created_by": f"texscope calibrate --export-kernels, target {target}",
        "created_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "measured_prefix": calibration.MEASURED,
        "cases": cases,
    }
    path = root / kernel_set.MANIFEST
    path.write_text(json.dumps(manifest, indent=1) + "\n")
    return path
