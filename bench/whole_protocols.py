"""A model's programs run whole, timed four ways on one device.

The tuner scales a tuning set's prices to the model's own programs run
whole (``in_place``), and ``bench/tuned.py --replay`` judges the plans by
runs of whole programs; how a whole program is timed moves its time.  Per
model of a ``tuned.py`` export (its ``all-buffer``, ``all-texture`` and,
where exported, ``tuned`` builds), in one process, in this order:

* ``alone``: each program in a session and context of its own, a warm-up,
  then ``--runs`` runs back to back (the tuners' protocol before 20e145b);
* ``turns``: the programs' sessions in one context, taking turns run by run
  (:func:`texscope.opencl.replay.taking_turns`, as the replay runs them);
* ``back to back``: those same sessions, each ``--runs`` runs in a row;
* ``alone again``: as ``alone``, in new sessions;
* ``tuner``: :func:`texscope.opencl.tune.run_whole`, the tuners' protocol
  now (rounds of fresh sessions taking turns).

The table gives each program's median (ms) and the all-texture program's
time over the all-buffer one's, per protocol.  Two sessions of one program
differing by more than each session's runs do is what made the tuners
time programs in several sessions.

    python bench/tuned.py --export DIR --target nvidia-opencl [models]      # here
    python bench/tuned.py --tune / --export-tuned ... (optional: the tuned build)
    python bench/whole_protocols.py DIR [--device N] [--runs 11] [--markdown]  # device
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _cli import (Recorded, add_markdown_option, built_at, device_line,  # noqa: E402
                  markdown_table, read_case)

PROGRAMS = ("all-buffer", "all-texture", "tuned")


def _median_ms(session, runs: int) -> float:
    return 1e3 * statistics.median(session.profiled(None).seconds for _ in range(runs))


def protocols(root: Path, device, runs: int) -> dict[str, dict[str, float]]:
    """Per protocol, each program's median time (ms) for the model in ``root``."""
    from texscope.opencl import replay as rp  # pylint: disable=import-outside-toplevel
    from texscope.opencl.plan import read_plan
    from texscope.opencl.session import Session
    from texscope.opencl.source import pyopencl
    from texscope.opencl.tune import run_whole

    plans = {p: read_plan(root / p) for p in PROGRAMS if (root / p / "plan.json").is_file()}
    inputs, _ = read_case(root, plans["all-buffer"])

    def session(plan, context=None):
        made = Session(plan, rp.in_order(plan.inputs, inputs), device, profile=True,
                       context=context, jobs=os.cpu_count() or 1)
        made.profiled(rp.in_order(plan.inputs, inputs))
        return made

    def alone() -> dict[str, float]:
        return {label: _median_ms(session(plan), runs) for label, plan in plans.items()}

    found = {"alone": alone()}
    context = pyopencl().Context([device])
    shared = {label: session(plan, context) for label, plan in plans.items()}
    turns: dict[str, list[float]] = {label: [] for label in plans}
    for turn in rp.taking_turns(list(plans), runs):
        for label in turn:
            turns[label].append(shared[label].profiled(None).seconds)
    found["turns"] = {label: 1e3 * statistics.median(r) for label, r in turns.items()}
    found["back to back"] = {label: _median_ms(s, runs) for label, s in shared.items()}
    shared = context = None
    found["alone again"] = alone()
    found["tuner"] = {label: 1e3 * timed["seconds"]
                      for label, timed in run_whole(plans, device, runs).items()}
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", help="a bench/tuned.py --export folder")
    parser.add_argument("models", nargs="*", help="model folders in it (default: all)")
    parser.add_argument("--device", type=int, help="OpenCL device index")
    parser.add_argument("--runs", type=int, default=11, help="timed runs per median")
    add_markdown_option(parser)
    args = parser.parse_args(argv)
    root = Path(args.directory)
    if not root.is_dir():
        parser.error(f"{root}: no such folder (bench/tuned.py --export writes one)")
    folders = [root / m.replace("/", "_") for m in args.models] or sorted(
        p for p in root.iterdir() if (p / "all-buffer" / "plan.json").is_file())
    if not folders:
        parser.error(f"{root}: holds no model of a bench/tuned.py export")
    for folder in folders:
        if not (folder / "all-buffer" / "plan.json").is_file():
            parser.error(f"{folder}: not a model of a bench/tuned.py export")
    from texscope.opencl.source import pick_device  # pylint: disable=import-outside-toplevel

    device = pick_device(args.device)
    rows = []
    for folder in folders:
        for protocol, times in protocols(folder, device, args.runs).items():
            rows.append((folder.name, protocol,
                         *(f"{times[p]:.3f}" if p in times else "-" for p in PROGRAMS),
                         f"{times['all-texture'] / times['all-buffer']:.3f}"))
        print(f"  {folder.name}: ran", flush=True)
    built = built_at(root)
    with Recorded(args.markdown, "whole_protocols.py", device_line(device), raw=True,
                  built=built):
        print(f"Median of {args.runs} runs per program and protocol, ms.\n\n" + "\n".join(
            markdown_table(("model", "protocol", *PROGRAMS, "texture / buffer"), rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
