"""Run a built model's plan on an OpenCL device, with numpy and pyopencl only.

``python -m texscope.opencl.replay OUT_DIR`` runs what ``texscope build
--target adreno-opencl -o OUT_DIR`` wrote (``plan.json``, ``kernels.cl``,
``weights.npz``; see ``texscope.opencl.plan``) on any OpenCL device with image
support, no TVM needed: the way to try a build on a phone or a desktop GPU.
:func:`replay` is also what ``texscope.opencl.run`` does after making the
plan from a build in memory.

``--steady N`` also times N inferences the way an application runs a model:
a :class:`~texscope.opencl.session.Session` set up once, then per inference
only the input upload, the enqueues and the output read-back (median wall
time; see ``texscope.opencl.session`` for exactly what is and is not timed).

Scopes come from the plan; a kernel that declares an image for a tensor held
in a buffer (or the reverse) is an error, and so is a kernel missing from the
source.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from collections.abc import Mapping

import attrs
import numpy as np

from ..errors import TexscopeError, exit_status
from ..diagnostics.numerics import compare
from .plan import Plan, read_plan
from .session import KernelTime, RunResult, Session
from .resolve import resolved
from .source import devices, pick_device


def in_order(names: tuple[str, ...], inputs) -> list:
    """``inputs`` as a list in the order of ``names``: a mapping is looked up
    by name (every name given, no other), a sequence kept as it is."""
    if not isinstance(inputs, Mapping):
        return list(inputs)
    missing = [name for name in names if name not in inputs]
    unknown = sorted(set(inputs) - set(names))
    if missing or unknown:
        problem = (f"no input named {', '.join(map(repr, unknown))}" if unknown
                   else f"no array for {', '.join(map(repr, missing))}")
        raise TexscopeError(f"main's inputs are {', '.join(map(repr, names))}: {problem}")
    return [inputs[name] for name in names]


def taking_turns(labels: list, runs: int) -> list[list]:
    """The order of ``labels`` in each of ``runs`` rounds: each round starts
    one label later, so that every program runs as often in each place.  On
    an H200 the very same program timed 7-9% apart in one place of a fixed
    order and another (hand_landmark_full, three runs)."""
    return [labels[i % len(labels):] + labels[:i % len(labels)] for i in range(runs)]


def replay(plan: Plan, inputs, device=None) -> RunResult:
    """Run ``plan`` once on an OpenCL device, each command timed.

    A fresh :class:`~texscope.opencl.session.Session` (memory allocated,
    constants uploaded, arguments bound) runs one inference.

    Parameters
    ----------
    plan : Plan
        From :func:`texscope.opencl.plan.read_plan`, or made from a build.
        A plan of symbolic size runs at the size of ``inputs``.
    inputs : sequence of numpy arrays, or dict of them by name
        One per parameter of ``main``: in order, or keyed by the input names
        (``plan.inputs``, the model's own).
    device : pyopencl.Device, optional
        The first device found by default.

    Returns
    -------
    RunResult
    """
    inputs = in_order(plan.inputs, inputs)
    if len(inputs) != len(plan.inputs):
        raise TexscopeError(f"main takes {len(plan.inputs)} inputs, got {len(inputs)}")
    return Session(plan, inputs, device, profile=True).profiled(inputs)


def median_times(runs: list[RunResult]) -> tuple[KernelTime, ...]:
    """Per command, the median of its time over several runs of one plan."""
    return tuple(
        attrs.evolve(first, seconds=statistics.median(run.times[i].seconds for run in runs))
        for i, first in enumerate(runs[0].times)
    )


def read_arrays(path, names: tuple[str, ...], what: str) -> list[np.ndarray]:
    """Arrays from an ``.npz``, by tensor name or in order (``arr_0``, ...)."""
    try:
        with np.load(path) as arrays:
            keys = set(arrays.files)
            if set(names) <= keys:
                return [arrays[name] for name in names]
            positional = [f"arr_{i}" for i in range(len(names))]
            if set(positional) <= keys:
                return [arrays[key] for key in positional]
    except (OSError, ValueError) as err:
        raise TexscopeError(f"{path}: cannot read {what} ({err})") from None
    raise TexscopeError(f"{path}: {what} must be named {', '.join(names)} (or be "
                        f"arr_0..arr_{len(names) - 1}); it has {', '.join(sorted(keys))}")


def random_inputs(plan: Plan, seed: int = 0, sizes=None) -> list[np.ndarray]:
    """Uniform [-1, 1) arrays for ``main``'s parameters; a plan of symbolic
    size takes the value of each size variable from ``sizes`` (a dict)."""
    if plan.is_symbolic:
        missing = sorted(set(plan.sizes) - set(sizes or {}))
        if missing:
            raise TexscopeError(f"main's inputs have symbolic sizes ({', '.join(plan.sizes)}): "
                                "give arrays of the size to run with --inputs, or the sizes "
                                f"(sizes={{'{missing[0]}': ...}})")
        plan = resolved(plan, {name: int(sizes[name]) for name in plan.sizes})
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, plan.spec(name).shape).astype(plan.spec(name).dtype)
            for name in plan.inputs]


def _describe(device) -> str:
    return (f"{device.name.strip()} ({device.platform.name.strip()}, "
            f"driver {device.driver_version.strip()})")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m texscope.opencl.replay",
        description="Run a texscope build (plan.json, kernels.cl, weights.npz) on an "
                    "OpenCL device; needs numpy and pyopencl, not TVM.")
    p.add_argument("directory", nargs="?", help="what `texscope build -o DIR` wrote")
    p.add_argument("--inputs", help=".npz with main's inputs, by name or arr_0.. "
                                     "(default: uniform random, --seed)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--expected", help=".npz of reference outputs to compare with")
    p.add_argument("--tolerance", type=float, default=1e-3,
                   help="rtol, and atol as a fraction of each output's largest magnitude, "
                        "as texscope run compares (1e-3)")
    p.add_argument("--save-outputs", metavar="NPZ", help="write the outputs here")
    p.add_argument("--times", metavar="JSON", help="write per-command times here")
    p.add_argument("--repeat", type=int, default=1, help="runs; times are medians")
    p.add_argument("--steady", type=int, metavar="N",
                   help="also time N inferences of one session set up once (input upload, "
                        "the commands, output read-back; see texscope.opencl.session) and "
                        "print their median wall time")
    p.add_argument("--device", type=int, help="device index (see --list-devices)")
    p.add_argument("--list-devices", action="store_true")
    p.add_argument("--top", type=int, default=10, help="slowest commands to list")
    return p


def _exclusive(path: str | None) -> Path | None:
    """An output file that must not exist yet: a command never overwrites
    what it did not write."""
    if path is None:
        return None
    out = Path(path)
    if out.exists():
        raise TexscopeError(f"{out} exists; replay writes only new files")
    return out


def _main(args) -> int:
    if args.list_devices:
        for index, device in enumerate(devices()):
            print(f"{index}: {_describe(device)}")
        return 0
    if args.directory is None:
        raise TexscopeError("give the directory `texscope build -o DIR` wrote")
    save, times_file = _exclusive(args.save_outputs), _exclusive(args.times)
    plan = read_plan(args.directory)
    inputs = (read_arrays(args.inputs, plan.inputs, "inputs") if args.inputs
              else random_inputs(plan, args.seed))
    expected = read_arrays(args.expected, plan.outputs, "expected outputs") \
        if args.expected else None
    if args.steady is not None and args.steady < 1:
        raise TexscopeError(f"--steady {args.steady}: give a number of runs of at least 1")
    device = pick_device(args.device)
    runs = [replay(plan, inputs, device) for _ in range(max(args.repeat, 1))]
    run, times = runs[0], median_times(runs)
    print(f"ran {Path(args.directory) / 'plan.json'} on {_describe(device)}: "
          f"{run.launches} kernel launches, {run.copies} copies, {run.images} images")
    status = 0
    if expected is not None:
        check = compare(run.outputs, expected, args.tolerance, args.tolerance, of_scale=True)
        print(check.line(args.expected))
        status = 0 if check.ok else 1
    total = sum(t.seconds for t in times)
    label = f"median of {len(runs)}" if len(runs) > 1 else "one run"
    print(f"time per command ({label}), slowest first (total {total * 1e3:.3f} ms):")
    for timed in sorted(times, key=lambda t: -t.seconds)[:args.top]:
        print(f"  {timed.seconds * 1e3:9.3f} ms  {timed.binding:<12} {timed.kernel}")
    steady = None
    if args.steady:
        session = Session(plan, inputs, device)
        seconds = session.wall_times(inputs, args.steady)
        steady = {"runs": args.steady, "median_s": statistics.median(seconds),
                  "min_s": min(seconds), "max_s": max(seconds)}
        print(f"steady state: {steady['median_s'] * 1e3:.3f} ms per inference, median of "
              f"{args.steady} (min {steady['min_s'] * 1e3:.3f}, max {steady['max_s'] * 1e3:.3f}; "
              "input upload, commands, output read-back)")
        if expected is not None:
            check = compare(session.run(inputs), expected, args.tolerance, args.tolerance,
                            of_scale=True)
            print("steady session " + check.line(args.expected))
            status = status or (0 if check.ok else 1)
    if save is not None:
        np.savez(save, **dict(zip(plan.outputs, run.outputs)))
    if times_file is not None:
        times_file.write_text(json.dumps({
            "device": _describe(device), "runs": len(runs),
            "launches": run.launches, "copies": run.copies, "images": run.images,
            "total_s": total,
            **({"steady": steady} if steady else {}),
            "commands": [attrs.asdict(t) for t in times],
        }, indent=1) + "\n")
    return status


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    return exit_status(lambda: _main(args), "replay")


if __name__ == "__main__":
    sys.exit(main())
