"""texscope-run (runtime/) against the Python replay: same outputs, less host time.

For each build, on one OpenCL device: both runners' outputs on the same
inputs (bit-equal expected: the same kernels, arguments and memory), the
kernels' and copies' summed time from OpenCL profiling (median of --repeat
runs), and the steady-state wall time per inference (median of --steady):
memory, kernels and their arguments set up once, then per inference the
inputs uploaded, every command enqueued and the outputs read back.  Host
overhead ("host") is the steady wall time less the profiled device time (on
a CPU device such as PoCL, where host and kernels share the cores, noise);
"issue" is the time the host spends issuing the uploads and commands, before
it waits for the outputs: the host's own cost whatever the device.  The
native runner's goal is at most half the Python replay's.

The Python steady state here is a ``texscope.opencl.session.Session`` (one
kernel object per launch, arguments set once), timed by this script's loop
so that the issue time is seen: the same recipe as texscope-run's
``--steady``.

Run: ``python bench/native_runner.py [--device N] [--steady N] [model ...]``
builds the models here and times them here.  Where TVM is not installed
(the GPU machine), build here and time there:

    python bench/native_runner.py --export DIR [model ...]     # here, with TVM
    python bench/native_runner.py --replay DIR [--binary PATH] [--device N] [--markdown]

``--export`` writes each model's build as ``DIR/<model>/`` with its random
inputs beside the plan (``inputs.npz``).  ``--markdown`` writes the table
into docs/benchmarks.md (``$TEXSCOPE_BENCHMARKS_MD`` names another file),
headed with the date, device, driver and the commits of the run and export.

Models: the zoo networks and MediaPipe .tflite names (default: the zoo's
resnet, mobilenet_v2, unet, inception, chain64, and hand_recrop and
face_detection_short_range).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from texscope.errors import TexscopeError
from texscope.opencl import replay as rp
from texscope.opencl.plan import PLAN_FILE, read_plan
from texscope.opencl.session import Session
from texscope.opencl.source import pick_device
from _cli import (Recorded, built_at, device_line, export_meta, exported, markdown_table,
                  refuse_unknown, replay_folder, replay_parser, write_case)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ("resnet", "mobilenet_v2", "unet", "inception", "chain64",
           "hand_recrop", "face_detection_short_range")


def known_models() -> list[str]:
    from texscope.models import zoo  # needs TVM: only where models are built
    from texscope.models.corpus import mediapipe_models

    return [*zoo.NETWORKS, *mediapipe_models()]


def export(directory: Path, names, target="adreno-opencl") -> None:
    """Build each model for ``target`` (by default adreno-opencl with its own
    texture limits) and write it with random inputs: what a TVM-free machine
    times."""
    import texscope  # needs TVM: only where models are built
    from texscope.diagnostics import verify
    from texscope.frontend.tflite_model import load_tflite
    from texscope.models import zoo
    from texscope.models.corpus import mediapipe_models

    for name in names:
        if name in zoo.NETWORKS:
            mod = zoo.with_constant_weights(zoo.NETWORKS[name]())
        else:
            mod = load_tflite(mediapipe_models()[name])
        texscope.build(mod, target).export(directory / name)
        write_case(directory / name, mod, verify.random_inputs(mod), expected=False)
        print(f"exported {name} -> {directory / name}", flush=True)
    export_meta(directory, target)


def python_steady(plan, inputs, device, count: int) -> tuple[list, list[float], list[float]]:
    """Outputs, wall seconds and seconds spent issuing the uploads and
    launches of ``count`` inferences of one :class:`Session` (set up once:
    memory, constants, each launch's kernel with its arguments bound)."""
    session = Session(plan, inputs, device)
    session.run(inputs)
    memory = session.memory
    arrays = [memory.staged(spec, np.ascontiguousarray(array, dtype=spec.dtype))
              for spec, array in zip(session.inputs, inputs)]
    walls, submits = [], []
    for _ in range(count):
        start = time.perf_counter()
        for spec, array in zip(session.inputs, arrays):
            memory.write(spec, array)
        for _, _, enqueue in session.commands:
            enqueue()
        submitted = time.perf_counter()
        for spec, host in zip(session.outputs, session.host_outputs):
            memory.read(spec, host)
        session.queue.finish()
        walls.append(time.perf_counter() - start)
        submits.append(submitted - start)
    return [output.copy() for output in session.host_outputs], walls, submits


def native_device(binary: Path, device) -> int:
    """The index texscope-run gives ``device`` (it may see other platforms
    than pyopencl: it opens drivers directly where no loader is installed)."""
    done = subprocess.run([str(binary), "--list-devices"], capture_output=True, text=True)
    if done.returncode != 0:
        raise TexscopeError(f"{binary} --list-devices: {done.stderr.strip()}")
    for line in done.stdout.splitlines():
        index, _, description = line.partition(": ")
        if description == device_line(device):
            return int(index)
    raise TexscopeError(f"{binary} does not see {device_line(device)}; it lists: "
                        f"{'; '.join(done.stdout.splitlines())}")


def native(binary: Path, build: Path, inputs: Path, args, index: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out, times = Path(tmp) / "outputs.npz", Path(tmp) / "times.json"
        done = subprocess.run(
            [str(binary), str(build), "--inputs", str(inputs), "--save-outputs", str(out),
             "--times", str(times), "--repeat", str(args.repeat), "--steady", str(args.steady),
             "--device", str(index)], capture_output=True, text=True)
        if done.returncode != 0:
            raise TexscopeError(f"{binary} on {build}: {done.stderr.strip()}")
        with np.load(out) as saved:
            outputs = {name: saved[name] for name in saved.files}
        return {"outputs": outputs, **json.loads(times.read_text())}


def measure(directory: Path, names, binary: Path, args) -> list[dict]:
    device = pick_device(args.device)
    index = native_device(binary, device)
    rows = []
    for name in names:
        build = directory / name
        inputs_file = build / "inputs.npz"
        plan = read_plan(build)
        inputs = rp.read_arrays(inputs_file, plan.inputs, "inputs")
        runs = [rp.replay(plan, inputs, device) for _ in range(args.repeat)]
        python_device = sum(t.seconds for t in rp.median_times(runs))
        steady_outputs, walls, submits = python_steady(plan, inputs, device, args.steady)
        theirs = native(binary, build, inputs_file, args, index)
        equal = all(np.array_equal(theirs["outputs"][n], a) and np.array_equal(s, a)
                    for n, a, s in zip(plan.outputs, runs[0].outputs, steady_outputs))
        python_wall = statistics.median(walls)
        native_wall = theirs["steady"]["median_s"]
        rows.append({
            "model": name, "equal": equal, "commands": len(plan.steps),
            "python_device_ms": python_device * 1e3, "native_device_ms": theirs["total_s"] * 1e3,
            "python_wall_ms": python_wall * 1e3, "native_wall_ms": native_wall * 1e3,
            "python_host_ms": (python_wall - python_device) * 1e3,
            "native_host_ms": (native_wall - theirs["total_s"]) * 1e3,
            "python_submit_ms": statistics.median(submits) * 1e3,
            "native_submit_ms": theirs["steady"]["submit_median_s"] * 1e3,
        })
        print(f"measured {name}", file=sys.stderr, flush=True)
    return rows


def _ratio(numerator: float, denominator: float) -> str:
    return f"{numerator / denominator:.2f}" if denominator > 0 and numerator >= 0 else "-"


def table(rows: list[dict], markdown: bool) -> str:
    head = ["model", "cmds", "bit-equal", "device ms", "wall ms py", "wall ms native",
            "host ms py", "host ms native", "host native/py", "issue ms py", "issue ms native",
            "issue native/py"]
    body = [[r["model"], str(r["commands"]), "yes" if r["equal"] else "NO",
             f"{r['python_device_ms']:.3f}",
             *(f"{r[k]:.3f}" for k in ("python_wall_ms", "native_wall_ms", "python_host_ms",
                                       "native_host_ms")),
             _ratio(r["native_host_ms"], r["python_host_ms"]),
             f"{r['python_submit_ms']:.3f}", f"{r['native_submit_ms']:.3f}",
             _ratio(r["native_submit_ms"], r["python_submit_ms"])]
            for r in rows]
    if markdown:
        return "\n".join(markdown_table(head, body))
    widths = [max(len(x) for x in column) for column in zip(head, *body)]
    return "\n".join("  ".join(x.rjust(w) for x, w in zip(row, widths)) for row in [head, *body])


def main(argv=None) -> int:
    p = replay_parser(__doc__, "models", f"default: {' '.join(DEFAULT)}",
                      "build here (needs TVM)", "time what --export wrote", target=False)
    p.add_argument("--binary", type=Path, default=ROOT / "runtime" / "build" / "texscope-run")
    p.add_argument("--repeat", type=int, default=5, help="profiled runs (median per command)")
    p.add_argument("--steady", type=int, default=50, help="steady-state inferences (median)")
    args = p.parse_args(argv)
    args.export = None if args.export is None else Path(args.export)
    if args.replay is None:
        refuse_unknown(p, args.models, known_models())
    else:
        args.replay = replay_folder(p, args.replay)
        try:
            refuse_unknown(p, args.models, exported(args.replay, (), PLAN_FILE))
        except TexscopeError as err:
            p.error(str(err))
    if args.export is None and not args.binary.is_file():
        p.error(f"{args.binary}: no texscope-run; build it: cmake -S runtime -B runtime/build "
                "&& cmake --build runtime/build")
    try:
        if args.export:
            export(args.export, args.models or DEFAULT)
            return 0
        if args.replay is None:
            from texscope.opencl import device_target  # needs TVM, as building here does

            with tempfile.TemporaryDirectory() as tmp:
                export(Path(tmp), args.models or DEFAULT,
                       device_target(pick_device(args.device), "adreno-opencl"))
                rows = measure(Path(tmp), args.models or DEFAULT, args.binary, args)
        else:
            rows = measure(args.replay, exported(args.replay, args.models, PLAN_FILE),
                           args.binary, args)
        device = pick_device(args.device)
        built = built_at(args.replay) if args.replay else ""
        with Recorded(args.markdown, "native_runner.py", device_line(device), raw=True,
                      built=built):
            print(f"{device_line(device)}" + (f"; {built}" if built else "")
                  + f"; steady: median of {args.steady} inferences; device: profiled, "
                  f"median of {args.repeat} runs\n")
            print(table(rows, args.markdown))
        return 0 if all(r["equal"] for r in rows) else 1
    except TexscopeError as err:
        print(f"native_runner: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
