"""Plans from a device's own cost profile, run on that device.

Per network, in one process, on one OpenCL device, four builds (five with
``--relaxed``) run on the same inputs:

* ``measured``: planned with the device's profile (``--profile FILE``, else
  ``texscope calibrate`` runs first);
* ``default``: planned with the target preset's built-in profile;
* ``all texture``: every eligible tensor in a texture (a profile whose every
  texture read and write saves 1000 bytes per byte: the planner then makes a
  texture of every tensor the registry allows);
* ``all buffer``: no texture at all (texture limits of 1 texel);
* ``relaxed`` (``--relaxed``): as ``measured``, with packed convs allowed to
  read their data from a buffer too (the built-in registry has them read
  textures only, as upstream; this shows what the profile would do without
  that rule).

The table gives each build's summed kernel and copy time (OpenCL profiling
events, median of ``--runs``), images and copies, and whether every output
matches the CPU.  Then how well each profile's plan cost predicts the
measured times: for every network and build, the plan's cost in seconds
(``texscope.plan_cost(..., profile=...).seconds``, relative to all buffers)
against the measured time minus the all-buffer build's, Pearson's r and
Spearman's rho over all of them, for the measured profile and for the
default one.

On PoCL (a CPU OpenCL) images are emulated: the measured profile prices
them as slow, which is the point of measuring.

Run: ``python bench/calibrated.py [--device N] [--profile FILE] [--runs R]
[--relaxed] [network ...]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

import texscope
from texscope import calibrate, opencl, profile as cost_profile, registry, verify
from texscope.convert_layout import ConvertToPackedLayout
from texscope.pipeline import annotate_module

sys.path.insert(0, str(Path(__file__).parent))
from opencl_run import NETWORKS, scaled_inputs  # noqa: E402  (a sibling script)

EVERYWHERE = 1000.0  # the gain that makes every eligible tensor a texture


def relaxed_conv_entries():
    """Packed convs that read their data from either storage (user entries
    that shadow the built-in ones while registered)."""
    entries = []
    for builtin in registry.BUILTIN:
        if builtin.name in ("grouped_conv2d_nchw4c", "conv2d_nchw4c"):
            entries.append(registry.OpSupport(
                **{**{f: getattr(builtin, f) for f in (
                    "key", "outputs", "desired_layouts", "pack_when", "layout_attrs",
                    "cost_class", "sync", "keep_unlegalized")},
                   "name": builtin.name + "_relaxed", "inputs": (registry.ANY, registry.ANY),
                   "note": "bench: data from either storage"}))
    return entries


class _Registered:
    def __init__(self, entries):
        self.entries = entries

    def __enter__(self):
        self.saved = list(registry._user_entries)  # pylint: disable=protected-access
        for entry in reversed(self.entries):
            registry.register_op(entry)

    def __exit__(self, *exc):
        registry._user_entries[:] = self.saved  # pylint: disable=protected-access


def planned(mod, target, profile):
    """The annotated module (stages 1-5) that a build with ``profile`` runs."""
    texture = texscope.texture_target(target, profile)
    return annotate_module(ConvertToPackedLayout(texture.target)(mod), texture)[0]


def timed(result, inputs, device, runs):
    results = [opencl.run(result, inputs, device) for _ in range(runs)]
    return results[0], statistics.median(sum(t.seconds for t in r.times) for r in results)


def pearson(pairs) -> float:
    xs, ys = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    if len(pairs) < 3 or xs.std() == 0 or ys.std() == 0:
        return float("nan")
    return float(np.corrcoef(xs, ys)[0, 1])


def ranks(values) -> list[float]:
    """Ranks from 0, ties sharing their mean rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    result = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for i in order[start:end + 1]:
            result[i] = (start + end) / 2
        start = end + 1
    return result


def spearman(pairs) -> float:
    """Pearson's r of the ranks: whether the plan cost orders builds as their
    times do, whatever the scale (one slow network does not dominate)."""
    return pearson(list(zip(ranks([p[0] for p in pairs]), ranks([p[1] for p in pairs]))))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("networks", nargs="*", help=f"of {', '.join(NETWORKS)} (default all)")
    parser.add_argument("--device", type=int, default=0, help="OpenCL device index")
    parser.add_argument("--profile", help="the device's cost profile (default: calibrate now)")
    parser.add_argument("--runs", type=int, default=5, help="runs per build (median kept)")
    parser.add_argument("--relaxed", action="store_true",
                        help="also plan with packed convs reading buffers too")
    args = parser.parse_args(argv)
    args.networks = args.networks or list(NETWORKS)
    unknown = sorted(set(args.networks) - set(NETWORKS))
    if unknown:
        parser.error(f"unknown networks {unknown}; choose from {list(NETWORKS)}")
    device = calibrate.pick_device(args.device)
    if args.profile:
        measured = cost_profile.load(args.profile)
    else:
        print("calibrating (texscope calibrate, default settings) ...", flush=True)
        measured = cost_profile.from_document(calibrate.calibrate(args.device), "calibrated now")
    base = opencl.device_target(device)
    default = texscope.texture_target(base).profile
    everywhere = measured.with_gains(EVERYWHERE, EVERYWHERE, "every eligible tensor a texture")
    no_textures = dict(base, texture_spatial_limit=1, texture_depth_limit=1)
    print(f"device {args.device}: {device.name.strip()} ({device.platform.name.strip()}, "
          f"driver {device.driver_version.strip()})")
    print(f"measured profile {measured.describe()}")
    print(f"default profile  {default.describe()}")
    builds = [("measured", base, measured, []), ("default", base, default, []),
              ("all texture", base, everywhere, []), ("all buffer", no_textures, default, [])]
    if args.relaxed:
        builds.append(("relaxed", base, measured, relaxed_conv_entries()))

    header = ("network", "build", "images", "copies", "ms", "vs best of all-tex/all-buf",
              "predicted ms (measured)", "predicted ms (default)", "matches CPU")
    rows, pairs = [], {"measured": [], "default": []}
    for name in args.networks:
        mod = NETWORKS[name]()
        inputs = scaled_inputs(mod)
        expected = verify.reference_outputs(mod, inputs)
        found = {}
        for label, target, prices, entries in builds:
            with _Registered(entries):
                result = texscope.build(mod, target, profile=prices)
                annotated = planned(mod, target, prices)
            run, seconds = timed(result, inputs, device, args.runs)
            ok = verify.compare(run.outputs, expected, 1e-3, 1e-3).ok
            predicted = {k: texscope.plan_cost(annotated, target, profile=p).seconds
                         for k, p in (("measured", measured), ("default", default))}
            found[label] = (run, seconds, ok, predicted)
        floor = min(found["all texture"][1], found["all buffer"][1])
        for label, (run, seconds, ok, predicted) in found.items():
            if label != "all buffer":
                for k in pairs:
                    pairs[k].append((predicted[k], seconds - found["all buffer"][1]))
            rows.append((name, label, run.images, run.copies, f"{seconds * 1e3:.2f}",
                         f"{seconds / floor:.2f}", f"{predicted['measured'] * 1e3:+.2f}",
                         f"{predicted['default'] * 1e3:+.2f}", "yes" if ok else "NO"))
        print(f"  {name}: done", flush=True)
    widths = [max(len(str(r[i])) for r in (header, *rows)) for i in range(len(header))]
    for row in (header, *rows):
        print("  ".join(str(c).rjust(w) for c, w in zip(row, widths)))
    print("\nplan cost (relative to all buffers) against measured time minus the all-buffer "
          "build's, over every network and build:")
    for k, points in pairs.items():
        print(f"  {k:<8} profile: Pearson r = {pearson(points):+.3f}, Spearman rho = "
              f"{spearman(points):+.3f} over {len(points)} builds")


if __name__ == "__main__":
    main()
