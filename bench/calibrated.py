"""Plans from a device's own cost profile, run on that device.

Per network, in one process, on one OpenCL device, these builds run on the
same inputs:

* one per measured profile (``--profile FILE``, repeatable, labelled by the
  file's stem; with none, ``texscope calibrate`` runs first and the build is
  ``measured``): planned with the device's profile;
* ``default``: planned with the target preset's built-in profile;
* ``all texture``: every eligible tensor in a texture (a profile whose every
  texture read and write saves 1000 bytes per byte: the planner then makes a
  texture of every tensor the registry allows);
* ``all buffer``: no texture at all (texture limits of 1 texel).

The table gives each build's summed kernel and copy time (OpenCL profiling
events, median of ``--runs``), images and copies, and whether every output
matches the CPU.  Then how well each profile's plan cost predicts the
measured times: for every network and build, the plan's cost in seconds
(``texscope.plan_cost(..., profile=...).seconds``, relative to all buffers)
against the measured time minus the all-buffer build's, Pearson's r and
Spearman's rho over all of them, for each measured profile and for the
default one.  So two calibrations of one device (``texscope calibrate``'s
microbenchmarks, and ``--kernels`` from texscope's own built kernels) compare
in one run: ``--profile micro.json --profile kernels.json``.

On PoCL (a CPU OpenCL) images are emulated: the measured profile prices
them as slow, which is the point of measuring.

Where TVM is not installed (a GPU machine), build here with that device's
profile and replay there; the replay needs numpy and pyopencl only:

    python bench/calibrated.py --export DIR --profile gpu.json [--profile ...] [network ...]  # here
    python bench/calibrated.py --replay DIR [--device N]                      # there

Run: ``python bench/calibrated.py [--device N] [--profile FILE ...] [--runs R]
[network ...]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

from texscope.errors import TexscopeError
from texscope.opencl import calibrate
from texscope.knowledge import profile as cost_profile
from texscope.diagnostics.numerics import compare
from texscope.opencl import replay as rp
from texscope.opencl.plan import read_plan

sys.path.insert(0, str(Path(__file__).parent))
from opencl_run import NETWORKS, network, scaled_inputs  # noqa: E402  (a sibling script)
from _cli import (NO_TEXTURES, Recorded, add_export_options, add_markdown_option,  # noqa: E402
                  device_line, exported, print_columns, read_case, refuse_unknown,
                  replay_folder, write_case)

EVERYWHERE = 1000.0  # the gain that makes every eligible tensor a texture
TOLERANCE = 1e-3


def planned(mod, target, profile):
    """The annotated module (stages 1-5) that a build with ``profile`` runs."""
    import texscope
    from texscope.convert_layout import ConvertToPackedLayout
    from texscope.pipeline import annotate_module

    texture = texscope.texture_target(target, profile)
    return annotate_module(ConvertToPackedLayout(texture.target)(mod), texture)[0]


def export(directory: Path, names, measured: dict, device=None) -> None:
    """Build every network with each profile (TVM needed); write the plans,
    the inputs, the CPU outputs and each plan's predicted cost under every
    profile.  ``measured`` maps a label to a device's CostProfile."""
    import texscope
    from texscope import opencl
    from texscope.knowledge.targets import texture_target

    base = (opencl.device_target(device) if device is not None
            else json.loads(str(texture_target("adreno-opencl").target)))
    default = texscope.texture_target(base).profile
    everywhere = default.with_gains(EVERYWHERE, EVERYWHERE, "every eligible tensor a texture")
    no_textures = dict(base, **NO_TEXTURES)
    builds = [(label, base, prices) for label, prices in measured.items()]
    builds += [("default", base, default), ("all texture", base, everywhere),
               ("all buffer", no_textures, default)]
    pricing = {**measured, "default": default}
    for name in names:
        mod = network(name)
        root = directory / name
        predicted = {}
        for label, target, prices in builds:
            out = root / label.replace(" ", "-")
            out.mkdir(parents=True, exist_ok=True)
            opencl.plan_of(texscope.build(mod, target, profile=prices)).write(out)
            annotated = planned(mod, target, prices)
            predicted[label] = {k: texscope.plan_cost(annotated, target, profile=p).seconds
                                for k, p in pricing.items()}
        write_case(root, mod, scaled_inputs(mod))
        (root / "predicted.json").write_text(json.dumps({
            "builds": [b[0] for b in builds], "predicted_s": predicted,
            "profiles": {k: p.describe() for k, p in pricing.items()},
        }, indent=1))
        print(f"  {name}: built", flush=True)


def measure(directory: Path, names, device, runs: int) -> dict:
    """Replay every exported build (no TVM): per network, per build, the run,
    its median time, whether it matches the CPU, its predicted costs.  The
    builds of a network take turns run by run, so a drift of the device's
    clock touches them all alike."""
    found = {}
    for name in names:
        root = directory / name
        meta = json.loads((root / "predicted.json").read_text())
        plans = {label: read_plan(root / label.replace(" ", "-")) for label in meta["builds"]}
        inputs, expected = read_case(root, next(iter(plans.values())))
        results = {label: [rp.replay(plan, inputs, device)] for label, plan in plans.items()}
        for _ in range(runs):
            for label, plan in plans.items():
                results[label].append(rp.replay(plan, inputs, device))
        found[name] = {}
        for label, runs_of in results.items():
            timed = runs_of[1:] or runs_of  # the first run of each warms up
            seconds = statistics.median(r.seconds for r in timed)
            ok = compare(runs_of[0].outputs, expected, TOLERANCE, TOLERANCE).ok
            # Two builds that run the same program differ in time by noise only.
            same = [other for other in ("all texture", "all buffer")
                    if other != label and same_program(plans[label], plans[other])]
            found[name][label] = (runs_of[0], seconds, ok, meta["predicted_s"][label],
                                  same[0] if same else "")
        print(f"  {name}: ran", flush=True)
    return found


def same_program(a, b) -> bool:
    """Whether two plans run the same kernels on the same storages (their
    targets may differ, e.g. in texture limits)."""
    return a.source == b.source and a.steps == b.steps and a.tensors == b.tensors


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


def print_table(found: dict) -> None:
    first = next(iter(found.values()))
    profiles = list(next(iter(first.values()))[3])  # the predicted costs' profiles
    header = ("network", "build", "images", "copies", "ms", "vs best of all-tex/all-buf",
              *(f"predicted ms ({k})" for k in profiles), "matches CPU", "same program as")
    rows, pairs = [], {k: [] for k in profiles}
    for name, builds in found.items():
        floor = min(builds["all texture"][1], builds["all buffer"][1])
        for label, (run, seconds, ok, predicted, same) in builds.items():
            if label != "all buffer":
                for k in pairs:
                    pairs[k].append((predicted[k], seconds - builds["all buffer"][1]))
            rows.append((name, label, run.images, run.copies, f"{seconds * 1e3:.3f}",
                         f"{seconds / floor:.2f}",
                         *(f"{predicted[k] * 1e3:+.3f}" for k in profiles),
                         "yes" if ok else "NO", same or "-"))
    print_columns(header, rows)
    print("\nplan cost (relative to all buffers) against measured time minus the all-buffer "
          "build's, over every network and build but all-buffer:")
    for k, points in pairs.items():
        print(f"  {k:<14} profile: Pearson r = {pearson(points):+.3f}, Spearman rho = "
              f"{spearman(points):+.3f} over {len(points)} builds")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("networks", nargs="*", help=f"of {', '.join(NETWORKS)} (default all)")
    add_export_options(parser, "build only (needs --profile)")
    parser.add_argument("--device", type=int, default=0, help="OpenCL device index")
    parser.add_argument("--profile", action="append", default=[],
                        help="a cost profile measured on the device (repeatable; default: "
                             "calibrate now)")
    parser.add_argument("--runs", type=int, default=5, help="runs per build (median kept)")
    add_markdown_option(parser)
    args = parser.parse_args(argv)
    refuse_unknown(parser, args.networks, NETWORKS, "network")
    if args.export and not args.profile:
        parser.error("--export needs the target device's --profile")
    if args.replay:
        try:
            names = exported(replay_folder(parser, args.replay), args.networks, "predicted.json")
        except TexscopeError as err:
            parser.error(str(err))
    else:
        names = args.networks or list(NETWORKS)
    if args.export:
        export(Path(args.export), names, profiles(args))
        return
    device = calibrate.pick_device(args.device)
    with Recorded(args.markdown, "calibrated.py", device_line(device)):
        print(f"device {args.device}: {device_line(device)}")
        if args.replay:
            report(Path(args.replay), names, device, args.runs)
            return
        measured = profiles(args)
        with tempfile.TemporaryDirectory() as tmp:
            export(Path(tmp), names, measured, device)
            report(Path(tmp), names, device, args.runs)


def profiles(args) -> dict:
    """label -> the cost profiles ``--profile`` names, or one calibrated now."""
    if args.profile:
        measured = {Path(p).stem: cost_profile.load(p) for p in args.profile}
    else:
        print("calibrating (texscope calibrate, default settings) ...", flush=True)
        measured = {"measured": cost_profile.from_document(calibrate.calibrate(args.device),
                                                           "calibrated now")}
    return measured


def report(directory: Path, names, device, runs: int) -> None:
    """Print the profiles of an export, then its builds replayed on ``device``."""
    meta = json.loads((directory / names[0] / "predicted.json").read_text())
    for label, text in meta["profiles"].items():
        print(f"{label} profile: {text}")
    print_table(measure(directory, names, device, runs))


if __name__ == "__main__":
    main()
