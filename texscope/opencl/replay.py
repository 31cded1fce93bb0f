"""Run a built model's plan on an OpenCL device, with numpy and pyopencl only.

``python -m texscope.opencl.replay OUT_DIR`` runs what ``texscope build
--target adreno-opencl -o OUT_DIR`` wrote (``plan.json``, ``kernels.cl``,
``weights.npz``; see ``texscope.opencl.plan``) on any OpenCL device with image
support, no TVM needed: the way to try a build on a phone or a desktop GPU.
:func:`replay` is also what ``texscope.opencl.run`` does after making the
plan from a build in memory.

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

from ..errors import TexscopeError
from ..diagnostics.numerics import compare
from .memory import DeviceMemory
from .plan import CopyStep, KernelStep, Plan, ScalarArg, TensorArg, WorkspaceArg, read_plan
from .resolve import bind_sizes, resolved
from .source import compiled, default_device, devices, kernel_signatures, pick_device, pyopencl


@attrs.frozen
class KernelTime:
    """One command of the run, timed by OpenCL profiling events."""

    binding: str
    kernel: str
    seconds: float


@attrs.frozen
class RunResult:
    """Outputs of a run and what it took.

    ``allocated_bytes``: device memory the run held (every tensor, workspace
    and staging buffer its own object for the whole run: see
    :class:`texscope.opencl.memory.DeviceMemory`), not the Relax VM's peak.
    """

    outputs: tuple[np.ndarray, ...] = attrs.field(eq=False)
    times: tuple[KernelTime, ...]
    images: int
    copies: int
    allocated_bytes: int = 0

    def slowest(self) -> list[KernelTime]:
        return sorted(self.times, key=lambda t: -t.seconds)

    @property
    def launches(self) -> int:
        return len(self.times) - self.copies


class Launcher:
    def __init__(self, cl, program, memory: DeviceMemory, plan: Plan):
        self.cl = cl
        self.program = program
        self.memory = memory
        self.plan = plan
        self.kernels: dict[str, object] = {}
        self.declared = {name: [p.strip() for p in params.split(",")]
                         for name, params in kernel_signatures(plan.source).items()}

    def kernel(self, step: KernelStep):
        if step.kernel not in self.kernels:
            # Known from the source, not from CL_PROGRAM_KERNEL_NAMES: NVIDIA's
            # driver (580) corrupts the heap answering that for a program of
            # many long kernel names (pose_landmark_full).
            if step.kernel not in self.declared:
                raise TexscopeError(f"kernel {step.kernel} is not in the OpenCL source",
                                    "main", step.binding)
            self.kernels[step.kernel] = self.cl.Kernel(self.program, step.kernel)
        return self.kernels[step.kernel]

    def _tensor(self, step: KernelStep, position: int, arg: TensorArg):
        """The memory of a tensor argument, after checking that the kernel
        declares the storage the program holds it in."""
        tensor = self.plan.spec(arg.tensor)
        if tensor.scope != arg.scope:
            raise TexscopeError(
                f"kernel {step.kernel} takes {tensor.name} as {arg.scope!r} but the "
                f"program holds it in {tensor.scope!r}", "main", step.binding)
        declared = self.declared[step.kernel][position]
        if tensor.is_texture != ("image2d_array_t" in declared):
            raise TexscopeError(
                f"kernel {step.kernel} declares `{declared}` for {tensor.name}, held in "
                f"{tensor.scope!r}; textures are image2d_array_t images and buffers "
                "otherwise", "main", step.binding)
        return self.memory.allocate(tensor)

    def launch(self, step: KernelStep):
        kernel = self.kernel(step)
        for position, arg in enumerate(step.args):
            if isinstance(arg, ScalarArg):
                value = np.dtype(arg.dtype).type(arg.value)
            elif isinstance(arg, WorkspaceArg):
                value = self.memory.workspace((step.binding, arg.name), arg.nbytes)
            else:
                value = self._tensor(step, position, arg)
            kernel.set_arg(position, value)
        return self.cl.enqueue_nd_range_kernel(
            self.memory.queue, kernel, step.global_size, step.local_size)


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


def replay(plan: Plan, inputs, device=None) -> RunResult:
    """Run ``plan`` once on an OpenCL device.

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
    cl = pyopencl()
    inputs = in_order(plan.inputs, inputs)
    if len(inputs) != len(plan.inputs):
        raise TexscopeError(f"main takes {len(plan.inputs)} inputs, got {len(inputs)}")
    if plan.is_symbolic:
        plan = resolved(plan, bind_sizes(plan, inputs))
    device = device or default_device()
    context, program = compiled(plan.source, device)
    queue = cl.CommandQueue(context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    memory = DeviceMemory(cl, context, queue)
    for name, array in zip(plan.inputs, inputs):
        memory.upload(plan.spec(name), array)
    for name, array in plan.constants.items():
        memory.upload(plan.spec(name), array)
    launcher = Launcher(cl, program, memory, plan)
    events = []
    for step in plan.steps:
        if isinstance(step, CopyStep):
            event = memory.copy(plan.spec(step.source), plan.spec(step.target))
            events.append((step.binding, "to_vdevice", event))
        else:
            events.append((step.binding, step.kernel, launcher.launch(step)))
    outputs = tuple(memory.download(plan.spec(name)) for name in plan.outputs)
    times = tuple(
        KernelTime(binding, kernel, (event.profile.end - event.profile.start) * 1e-9)
        for binding, kernel, event in events
    )
    return RunResult(
        outputs, times,
        images=memory.images(),
        copies=sum(isinstance(step, CopyStep) for step in plan.steps),
        allocated_bytes=memory.allocated_bytes,
    )


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


def random_inputs(plan: Plan, seed: int = 0) -> list[np.ndarray]:
    """Uniform [-1, 1) arrays for ``main``'s parameters."""
    if plan.is_symbolic:
        raise TexscopeError(f"main's inputs have symbolic sizes ({', '.join(plan.sizes)}): "
                            "give arrays of the size to run with --inputs")
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
    if save is not None:
        np.savez(save, **dict(zip(plan.outputs, run.outputs)))
    if times_file is not None:
        times_file.write_text(json.dumps({
            "device": _describe(device), "runs": len(runs),
            "launches": run.launches, "copies": run.copies, "images": run.images,
            "total_s": total,
            "commands": [attrs.asdict(t) for t in times],
        }, indent=1) + "\n")
    return status


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _main(args)
    except TexscopeError as err:
        print(f"replay: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
