"""texscope's programs against LiteRT's own runtimes, same model, same GPU.

Per MediaPipe model (the ``.tflite`` files of texscope's corpus), side by
side in one process on the same inputs:

- LiteRT's ``CompiledModel`` (``ai-edge-litert``) on the CPU, and with its
  GPU accelerator alone (ML Drift over WebGPU/Vulkan) in float32
  (``GpuOptions(enforce_f32=True)``) and in its float16 default;
- texscope's builds replayed as a steady session
  (``texscope.opencl.session``): ``textures`` (the default plan),
  ``buffers`` (no texture), and any other build folder found beside them in
  the export (``DIR/<model>/tuned/``, what ``texscope tune -o`` writes: a
  column per folder).

Time: wall clock per inference in steady state (input written, the run,
every output read back), median of ``--runs`` (50) per round, the variants
taking turns within each round, the median of ``--rounds`` (5) rounds.
Error: each output's largest difference from LiteRT's CPU outputs over that
output's largest magnitude, the worst output's.  Where LiteRT cannot make or
run a model (an operator its GPU lacks, a custom operator) the row says so.

Build here, run there (LiteRT's GPU needs a Vulkan loader and driver):

    python bench/vs_litert.py --export DIR [model ...]   # here, with TVM
    python bench/vs_litert.py --replay DIR [--device N] [--markdown]   # there: numpy, pyopencl,
                                                                        #   ai-edge-litert

The export is ``opencl_run.py``'s (``kernel_pairs.py --export`` writes the
same folders), each model's ``.tflite`` beside its builds.
"""

from __future__ import annotations

import functools
import json
import statistics
import sys
from pathlib import Path

import numpy as np

from texscope.errors import TexscopeError
from texscope.opencl.plan import PLAN_FILE, read_plan
from texscope.opencl.session import Session, wall_clock
from texscope.opencl.source import pick_device
import opencl_run
from _cli import (Recorded, built_at, chosen_models, device_line, markdown_table, replay_folder,
                  replay_parser)

LITERT = ("litert_cpu", "litert_gpu_f32", "litert_gpu_f16")
#: An output this far from the CPU's (over its largest magnitude) is wrong.
WRONG = 1e-2


class LiteRT:
    """One LiteRT compiled model, its buffers made once."""

    def __init__(self, path: Path, variant: str):
        # pylint: disable=import-outside-toplevel
        from ai_edge_litert.compiled_model import CompiledModel
        from ai_edge_litert.gpu_options import GpuOptions
        from ai_edge_litert.hardware_accelerator import HardwareAccelerator
        from ai_edge_litert.options import Options

        if variant == "litert_cpu":
            options = Options(hardware_accelerators=HardwareAccelerator.CPU)
        else:
            options = Options(hardware_accelerators=HardwareAccelerator.GPU,
                              gpu_options=GpuOptions(enforce_f32=variant.endswith("f32")))
        self.model = CompiledModel.from_file(str(path), options=options)
        if variant != "litert_cpu" and not self.model.is_fully_accelerated():
            raise RuntimeError("not fully accelerated on the GPU")
        key = next(iter(self.model.get_signature_list()))
        self.outputs = [(d["shape"], np.dtype(d["dtype"]))
                        for d in self.model.get_output_tensor_details(key).values()]
        self.inputs = self.model.create_input_buffers(0)
        self.buffers = self.model.create_output_buffers(0)

    def run(self, arrays) -> list[np.ndarray]:
        for buffer, array in zip(self.inputs, arrays):
            buffer.write(np.ascontiguousarray(array))
        self.model.run_by_index(0, self.inputs, self.buffers)
        return [buffer.read(int(np.prod(shape)), dtype).reshape(shape)
                for buffer, (shape, dtype) in zip(self.buffers, self.outputs)]

    def wall_times(self, arrays, runs: int, warmup: int = 3) -> list[float]:
        return wall_clock(functools.partial(self.run, arrays), runs, warmup)


class Texscope:
    """A texscope build as a steady session."""

    def __init__(self, directory: Path, inputs, device):
        self.session = Session(read_plan(directory), inputs, device)

    def run(self, arrays) -> list[np.ndarray]:
        return [o.copy() for o in self.session.run(arrays)]

    def wall_times(self, arrays, runs: int) -> list[float]:
        return self.session.wall_times(arrays, runs)


def scaled_error(outputs, reference) -> float:
    """The worst output's largest difference over its largest magnitude."""
    if len(outputs) != len(reference):
        return float("inf")
    worst = 0.0
    for got, want in zip(outputs, reference):
        got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
        if got.size != want.size:
            return float("inf")
        scale = max(float(np.abs(want).max(initial=0.0)), 1e-30)
        worst = max(worst, float(np.abs(got.reshape(want.shape) - want).max(initial=0.0)) / scale)
    return worst


def texscope_builds(root: Path) -> list[str]:
    """The build folders of one exported model: textures, buffers, then others."""
    others = sorted(p.name for p in root.iterdir()
                    if (p / PLAN_FILE).is_file() and p.name not in opencl_run.BUILDS)
    return [*opencl_run.BUILDS, *others]


def measure(root: Path, device, runs: int, rounds: int) -> dict:
    """Per variant of one model: its median time, error, or why it failed."""
    inputs, _ = opencl_run.exported_arrays(root)
    variants, row = {}, {}
    makers = {name: functools.partial(LiteRT, root / "model.tflite", name) for name in LITERT}
    makers.update({name: functools.partial(Texscope, root / name, inputs, device)
                   for name in texscope_builds(root)})
    for name, make in makers.items():
        try:
            variants[name] = make()
            row[name] = {"outputs": variants[name].run(inputs)}
        except Exception as err:  # pylint: disable=broad-except  # a runtime refusing is a finding
            variants.pop(name, None)
            said = " ".join(line.strip() for line in str(err).splitlines() if line.strip())
            row[name] = {"failed": f"{type(err).__name__}: {said[-150:]}"}
    medians = {name: [] for name in variants}
    for _ in range(rounds):
        for name, variant in variants.items():  # the variants take turns
            medians[name].append(statistics.median(variant.wall_times(inputs, runs)))
    reference = row.get("litert_cpu", {}).get("outputs")
    for name in variants:
        row[name]["seconds"] = statistics.median(medians[name])
        row[name]["rounds"] = medians[name]
        if reference is not None:
            row[name]["error"] = scaled_error(row[name]["outputs"], reference)
    for result in row.values():
        result.pop("outputs", None)
    return row


def _cell(result) -> str:
    if "seconds" not in result:
        return "cannot run"
    return f"{result['seconds'] * 1e3:.3f}"


def _error(result) -> str:
    if "error" not in result:
        return "-"
    return f"{result['error']:.1e}" + (" WRONG" if result["error"] > WRONG else "")


def tables(rows: dict) -> list[str]:
    builds = sorted({b for row in rows.values() for b in row if b not in LITERT},
                    key=lambda b: (opencl_run.BUILDS.index(b) if b in opencl_run.BUILDS else 2, b))
    header = ["model", *(f"{v} ms" for v in (*LITERT, *builds)), "best texscope / gpu f32",
              *(f"{v} error" for v in (*LITERT[1:], *builds))]
    lines = markdown_table(header, [])
    wins, compared, failures = 0, 0, []
    for name, row in rows.items():
        mine = [row[b]["seconds"] for b in builds if "seconds" in row.get(b, {})]
        gpu = row["litert_gpu_f32"].get("seconds")
        ratio = "-"
        if mine and gpu:
            compared += 1
            wins += min(mine) <= gpu
            ratio = f"{min(mine) / gpu:.2f}"
        cells = [name, *(_cell(row.get(v, {})) for v in (*LITERT, *builds)), ratio,
                 *(_error(row.get(v, {})) for v in (*LITERT[1:], *builds))]
        lines.append("| " + " | ".join(cells) + " |")
        failures += [f"- {name}, {v}: {row[v]['failed']}" for v in (*LITERT, *builds)
                     if "failed" in row.get(v, {})]
    lines += ["", f"texscope's faster build at most LiteRT GPU float32's time: {wins} of "
              f"{compared} models LiteRT's GPU runs (goal: 8 of 11)"]
    if failures:
        lines += ["", "Not run:", *failures]
    return lines


def main(argv=None) -> int:
    p = replay_parser(__doc__, "models", "default: every MediaPipe model of the corpus")
    p.add_argument("--runs", type=int, default=50, help="inferences per round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json", metavar="FILE", help="write every measurement here")
    args = p.parse_args(argv)
    try:
        if not args.replay:
            loaders = chosen_models(p, args.models, {}, corpus_too=True)
        if not (args.export or args.replay):
            p.error("give --export DIR (where TVM is) or --replay DIR (where the GPU is)")
        if args.export:
            opencl_run.export(Path(args.export), loaders, args.target)
            return 0
        root = replay_folder(p, args.replay)
        names = [n for n in opencl_run.exported_models(root, args.models)
                 if (root / n / "model.tflite").is_file()]
        device = pick_device(args.device)
        rows = {}
        try:
            for name in names:
                rows[name] = measure(root / name, device, args.runs, args.rounds)
                print(f"measured {name}", file=sys.stderr, flush=True)
        except KeyboardInterrupt:  # SIGINT (``timeout -s INT``): the table of what was measured
            print(f"interrupted after {len(rows)} of {len(names)} models", file=sys.stderr)
    except TexscopeError as err:
        p.error(str(err))
    built = built_at(root)
    head = device_line(device) + (f"; {built}" if built else "")
    median = f"Median of {args.runs} inferences per round, median of {args.rounds} rounds."
    print(head + "\n")
    with Recorded(args.markdown, "vs_litert.py", device_line(device), raw=True, built=built):
        print(median + "\n\n" + "\n".join(tables(rows)))
    if args.json:
        Path(args.json).write_text(json.dumps({"device": head, "models": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
