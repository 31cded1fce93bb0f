"""``python -m texscope.opencl.tune DIR -o tuning.json``: time a tuning set on a device.

Numpy and pyopencl only (it runs on the device, where TVM is not).  The set's
program (every variant of every kernel, and every copy a plan could need,
each one binding: :mod:`texscope.backend.tuning.tuning_set`) is set up once
as a profiled :class:`~texscope.opencl.session.Session` (its hundreds of
kernels compiled as several programs at once, ``--jobs``), runs once to warm
up, then ``--repeats`` times as it is and with each kernel's neighbours just
before it (see :data:`STATES`), on the inputs the warm-up uploaded;
a variant's time is the median over the runs of its
launches' summed profiling-event time, a copy's likewise; the
fastest and slowest run are kept beside it (``min_seconds``,
``max_seconds``): the spread the planner's guard weighs.  The tuning file
(:mod:`texscope.opencl.tuning`) records the device, driver, model and target
the times belong to, and how long the timing took.  Where the set carries
the model's own all-buffer and all-texture programs (``in-place/``), they
then run whole, taking turns, in :data:`WHOLE_SESSIONS` sessions set up anew,
``--repeats`` times each after a warm-up: the times the planner scales the
set's prices to (``in_place``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path

from ..errors import TexscopeError
from .calibrate import Progress, describe_device
from .neighbours import Neighbours
from .plan import read_plan
from .replay import random_inputs, taking_turns
from .session import Session
from .source import default_device, pick_device, pyopencl
from . import tuning

DEFAULT_REPEATS = 9
# The model's own programs, run whole, are timed in this many sessions each:
# on an H200 one program ran 0.877 and 0.951 ms in two sessions (iris_landmark
# all-buffer), 2.808 and 2.320 ms (pose_landmark_full all-texture), each
# session's runs within a few percent: one session's spread understated the
# noise the planner's margin weighs (docs/benchmarks.md, "Whole programs:
# alone or taking turns").
WHOLE_SESSIONS = 2
# The inputs (every variant's operands, its weights among them) are uploaded
# once, by the warm-up run, as a model uploads its weights once; re-uploaded
# before every run (files before 2026-11-29 11:00) they moved the prices by
# 0.89-1.07x per class of variant on an H200 and took half the timed part.
# Each run of the program is timed twice: as it is (every variant's operands
# evicted, by its turn, by the variants before it: "cold"), and with each kernel's
# :class:`~texscope.opencl.neighbours.Neighbours` just before it (the maps it
# reads rewritten by a kernel, its weights left alone, its output images
# read: "chained"), as a kernel meets them in a model.  Variants are priced
# chained, copies cold.  Files written before 2026-11-29 09:00 priced buffer
# variants by each command run twice in a row ("warm"), texture variants
# cold: on an H200 (docs/benchmarks.md, docs/tuning.md) warm prices held for
# kernels of small weights and were half the model's time for those whose
# weights outweigh their maps (hand_landmark_full's 1152-channel 1x1 convs:
# 58-69 us warm, 114 in the model, 117 chained).
STATES = ("cold", "chained")


def measure(directory, device, repeats: int = DEFAULT_REPEATS, progress_stream=None,
            device_index: int = 0, jobs: int | None = None) -> dict:
    """The tuning document of the set in ``directory``, measured on ``device``
    (its kernels compiled as ``jobs`` programs at once, one per CPU by default)."""
    root = Path(directory)
    manifest = tuning.read_set(root)
    plan = read_plan(root / tuning.PROGRAM)
    inputs = random_inputs(plan)
    in_place = manifest.get("in_place")
    # Read now, so that a broken one stops the tuner before anything runs.
    whole_plans = {label: read_plan(root / folder)
                   for label, folder in in_place["programs"].items()} if in_place else {}
    progress = Progress(repeats + 2 + (1 if whole_plans else 0), progress_stream)
    started = time.perf_counter()
    session = Session(plan, inputs, device, profile=True, jobs=jobs or os.cpu_count() or 1)
    progress.step("compiled and set up")
    set_up_s = time.perf_counter() - started
    session.profiled(inputs)
    weights = frozenset(name for variant in manifest["variants"] for name in variant["weights"])
    neighbours = Neighbours(session, weights).before
    progress.step("warm-up")
    per_binding: dict[str, dict[str, list[float]]] = {state: {} for state in STATES}
    for run in range(repeats):
        for state, before in (("cold", None), ("chained", neighbours)):
            totals: dict[str, float] = {}
            for command in session.profiled(None, before=before).times:
                totals[command.binding] = totals.get(command.binding, 0.0) + command.seconds
            for binding, seconds in totals.items():
                per_binding[state].setdefault(binding, []).append(seconds)
        progress.step(f"run {run + 1}")

    def timed(binding: str, state: str) -> dict:
        """The median of the runs in ``state`` and, as the planner's noise
        margin, the fastest and slowest; every state's median beside them."""
        if binding not in per_binding["cold"]:
            raise TexscopeError(f"{root}: the program runs nothing for binding {binding!r}")
        runs = per_binding[state][binding]
        return {"seconds": statistics.median(runs), "min_seconds": min(runs),
                "max_seconds": max(runs),
                **{f"{s}_seconds": statistics.median(per_binding[s][binding]) for s in STATES}}

    kernels = {key: {"name": kernel["name"], "positions": kernel["positions"],
                     "shapes": kernel["shapes"], "variants": []}
               for key, kernel in manifest["kernels"].items()}
    for variant in manifest["variants"]:
        kernels[variant["kernel"]]["variants"].append(
            {"scopes": variant["scopes"],
             **timed(variant["binding"], "chained")})
    copies = [{**{k: v for k, v in copy.items() if k != "binding"}, **timed(copy["binding"], "cold")}
              for copy in manifest["copies"]]
    whole = {}
    if in_place:
        chosen_by = {k: in_place[k] for k in (tuning.DEFAULT_PROFILE,) if k in in_place}
        whole = {"in_place": {"function": in_place["function"], **chosen_by,
                              **run_whole(whole_plans, device, repeats, jobs)}}
        progress.step("in place")
        if "previous_tuning" in manifest:
            whole["previous_tuning"] = manifest["previous_tuning"]
    return {
        "format": tuning.FORMAT,
        "version": tuning.VERSION,
        "model": manifest["model"],
        "model_fingerprint": manifest["model_fingerprint"],
        "target": manifest["target"],
        "device": describe_device(device, device_index),
        "measured_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "repeats": repeats,
        "set_up_s": round(set_up_s, 2),
        "timed_s": round(time.perf_counter() - started, 2),
        "method": (f"python -m texscope.opencl.tune: OpenCL profiling events, one warm-up run "
                   f"(the only one uploading the inputs), "
                   f"then {repeats} times the whole tuning program as it is (cold) and with "
                   f"each kernel's input maps rewritten and output images read just before it "
                   f"(chained); median: chained for variants, cold for copies (min and max: "
                   f"the fastest and slowest)"
                   + (f"; the model's {', '.join(whole_plans)} programs then run whole "
                      f"in {WHOLE_SESSIONS} sessions each, set up anew, a warm-up then "
                      f"{repeats} runs each taking turns (in_place)" if in_place else "")),
        "kernels": kernels,
        "copies": copies,
        **whole,
    }


def run_whole(plans: dict, device, repeats: int, jobs: int | None = None,
              sessions: int = WHOLE_SESSIONS) -> dict:
    """The model's programs (label: :class:`~texscope.opencl.plan.Plan`) run
    whole on ``device``, as bench/tuned.py's replay runs them: in each of
    ``sessions`` rounds, all set up anew in one context, one warm-up
    inference each, then ``repeats`` timed ones taking turns
    (:func:`~texscope.opencl.replay.taking_turns`).  Per label, the median,
    fastest and slowest of its summed profiling-event time over the runs of
    every session, so that the spread holds the sessions' difference too."""
    runs: dict[str, list[float]] = {label: [] for label in plans}
    device = device or default_device()
    for _ in range(sessions):
        context = pyopencl().Context([device])
        live = {}
        for label, plan in plans.items():
            inputs = random_inputs(plan)
            live[label] = Session(plan, inputs, device, profile=True, context=context,
                                  jobs=jobs or os.cpu_count() or 1)
            live[label].profiled(inputs)
        for turn in taking_turns(list(plans), repeats):
            for label in turn:
                runs[label].append(live[label].profiled(None).seconds)
        live = context = None  # one round's device memory goes before the next's
    return {label: {"seconds": statistics.median(r), "min_seconds": min(r),
                    "max_seconds": max(r)} for label, r in runs.items()}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m texscope.opencl.tune",
        description="Time a tuning set (what `texscope tune MODEL -o DIR` wrote) on an "
                    "OpenCL device; needs numpy and pyopencl, not TVM.")
    p.add_argument("directory", help="the tuning set")
    p.add_argument("-o", "--output", required=True, help="the tuning file to write")
    p.add_argument("--device", type=int, help="device index (python -m "
                                              "texscope.opencl.replay --list-devices)")
    p.add_argument("--repeats", type=int, default=DEFAULT_REPEATS,
                   help=f"timed runs per median (default {DEFAULT_REPEATS})")
    p.add_argument("--jobs", type=int, help="programs compiled at once (default: one per CPU)")
    return p


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        out = Path(args.output)
        if out.exists() and not tuning.is_tuning_file(out):
            raise TexscopeError(f"{out} exists and is not a tuning file; not overwriting it")
        if args.repeats < 1:
            raise TexscopeError("--repeats must be at least 1")
        if args.jobs is not None and args.jobs < 1:
            raise TexscopeError("--jobs must be at least 1")
        device = pick_device(args.device)
        document = measure(args.directory, device, args.repeats, device_index=args.device or 0,
                           jobs=args.jobs)
        out.write_text(json.dumps(document, indent=1) + "\n")
    except TexscopeError as err:
        print(f"tune: error: {err}", file=sys.stderr)
        return 2
    variants = sum(len(k["variants"]) for k in document["kernels"].values())
    print(f"timed {variants} variants of {len(document['kernels'])} kernels and "
          f"{len(document['copies'])} copies on {document['device']['name']} in "
          f"{document['timed_s']} s ({document['set_up_s']} s compiling and setting up): "
          f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
