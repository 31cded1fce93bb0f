"""Built networks run on an OpenCL device: images against buffers.

Each network is built twice for an Adreno target: once as texscope plans it
(textures where they pay), once with no texture allowed (every tensor a
buffer).  Both are replayed on the same device, on the same inputs, in one
process; the table gives the summed kernel and copy time from OpenCL
profiling events (median of --repeat runs, per command), launches, images
and copies of the texture build, and whether both builds' outputs match the
CPU's (TVM's llvm build, computed where the networks were built).  The
slowest commands of both builds follow.

Where TVM is not installed (a GPU machine, a phone with Termux...), build
here and replay there; the replay needs numpy and pyopencl only:

    python bench/opencl_run.py --export DIR [network ...]   # here, with TVM
    python bench/opencl_run.py --replay DIR [--device N]    # there

``--export`` writes ``DIR/<network>/{textures,buffers}/`` (what ``texscope
build`` writes for ``python -m texscope.opencl.replay``) and the inputs and
CPU outputs as ``.npz``; the texture build uses the target's own limits, not
this machine's.  Without ``--export``/``--replay`` it builds and runs here,
with texture limits fitted to the device.

On PoCL (a CPU OpenCL) images are emulated in memory: those times show that
the mechanism works end to end, not how fast a phone's GPU is; a desktop
GPU's are not a phone's either.

Run: ``python bench/opencl_run.py [--device N] [--repeat R] [--markdown] [network ...]``
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import numpy as np

from texscope.errors import TexscopeError
from texscope.opencl import replay as rp
from texscope.opencl.plan import read_plan
from texscope.opencl.session import Session
from texscope.opencl.source import pick_device
from _cli import (NO_TEXTURES, Recorded, ZOO, agreement, built_at, device_line, export_meta, exported,
                  print_columns, read_case, refuse_unknown, replay_folder, replay_parser,
                  write_case)

NETWORKS = ZOO
BUILDS = ("textures", "buffers")


def network(name):
    from texscope.models import zoo  # needs TVM: only where networks are built

    return {
        "resnet": lambda: zoo.resnet_style(blocks=2),
        "mobilenet_v2": lambda: zoo.mobilenet_v2_style(),
        "unet": lambda: zoo.unet_style(),
        "inception": lambda: zoo.inception_block(),
        "chain64": lambda: zoo.conv_chain(64),
    }[name]()


def scaled_inputs(mod):
    """Random inputs with conv weights scaled by 1/sqrt(fan-in), so that a
    64-conv chain stays finite."""
    from texscope.diagnostics import verify

    arrays = verify.random_inputs(mod)
    return [(a / np.sqrt(np.prod(a.shape[1:]))).astype(a.dtype) if i and a.ndim == 4 else a
            for i, a in enumerate(arrays)]


def targets(base, device=None) -> dict:
    """The two builds' targets: ``base`` (fitted to ``device`` when given),
    and the same with no room for any texture."""
    from texscope import opencl
    from texscope.knowledge.targets import texture_target

    with_images = (opencl.device_target(device, base) if device is not None
                   else json.loads(str(texture_target(base).target)))
    return {"textures": with_images,
            "buffers": dict(with_images, **NO_TEXTURES)}


def export(directory: Path, loaders: dict, base: str, textures_profile=None) -> None:
    """Build every model both ways and write what a TVM-free replay needs:
    ``DIR/<name>/{textures,buffers}/``, ``inputs.npz``, ``expected.npz`` (the
    CPU's outputs), ``model.tflite`` where the model's loader reads a
    ``.tflite`` file (a ``functools.partial`` of it, as
    ``_cli.chosen_models`` makes them), and the commit and target it was
    built at (``_cli.export_meta``).  ``loaders``: name -> a callable
    giving the model's Relax module; ``textures_profile``: the textures
    build's cost profile (the preset's by default)."""
    import shutil

    import texscope

    for name, loader in loaders.items():
        mod = loader()
        root = directory / name
        for build_name, target in targets(base).items():
            (root / build_name).mkdir(parents=True, exist_ok=True)
            profile = textures_profile if build_name == "textures" else None
            texscope.build(mod, target, profile=profile).export(root / build_name)
        write_case(root, mod, scaled_inputs(mod))
        source = getattr(loader, "args", ("",))[0]
        if str(source).endswith(".tflite"):
            shutil.copyfile(source, root / "model.tflite")
        print(f"exported {name} -> {root}", flush=True)
    export_meta(directory, base)


def measure_plan(plan_dir: Path, inputs, expected, device, repeat: int) -> dict:
    """One build replayed: a profiled session set up once, warmed up once,
    then ``repeat`` runs; each command's median time and the outputs'
    agreement with ``expected``."""
    plan = read_plan(plan_dir)
    session = Session(plan, inputs, device, profile=True)
    session.profiled(inputs)
    runs = [session.profiled(inputs) for _ in range(repeat)]
    times = rp.median_times(runs)
    check = agreement(runs[0].outputs, expected)
    return {"plan": plan, "run": runs[0], "times": times, "total": sum(t.seconds for t in times),
            "ok": check.ok, "abs_err": check.max_abs_error, "rel_err": check.max_rel_error}


def exported_models(directory: Path, names=()) -> list[str]:
    """The models an export wrote into ``directory`` (those of ``names`` if any)."""
    return exported(directory, names, "textures")


def exported_arrays(root: Path) -> tuple[list, list]:
    """(inputs, CPU outputs) an export wrote for the model in ``root``."""
    return read_case(root, read_plan(root / "textures"))


def measure_exported(directory: Path, names, device, repeat: int) -> dict:
    results = {}
    for name in names:
        root = directory / name
        inputs, expected = exported_arrays(root)
        results[name] = _builds(lambda b: measure_plan(root / b, inputs, expected, device, repeat))
    return results


def measure_here(names, device, repeat: int, base: str) -> dict:
    import tempfile

    import texscope
    from texscope.diagnostics import verify

    results = {}
    for name in names:
        mod = network(name)
        inputs = scaled_inputs(mod)
        expected = verify.reference_outputs(mod, inputs)
        with tempfile.TemporaryDirectory() as tmp:
            def one(build_name, mod=mod, inputs=inputs, expected=expected, tmp=tmp):
                out = Path(tmp) / build_name
                out.mkdir()
                texscope.build(mod, targets(base, device)[build_name]).export(out)
                return measure_plan(out, inputs, expected, device, repeat)

            results[name] = _builds(one)
    return results


def _builds(measure) -> dict:
    row = {}
    for build_name in BUILDS:
        try:
            row[build_name] = measure(build_name)
        except TexscopeError as err:  # a compiler rejection is a finding, not the end
            row[build_name] = {"error": str(err)}
    return row


def _ms(result) -> str:
    return f"{result['total'] * 1e3:.3f}" if "total" in result else "failed"


def print_table(results: dict, top: int) -> None:
    header = ("network", "launches", "images", "copies", "images ms", "buffers ms",
              "img/buf", "matches CPU (img, buf)")
    rows = []
    for name, row in results.items():
        tex, buf = row["textures"], row["buffers"]
        run = tex.get("run")
        ratio = (f"{tex['total'] / buf['total']:.2f}" if "total" in tex and "total" in buf
                 else "-")
        matches = ", ".join(("yes" if r["ok"] else f"NO ({r['abs_err']:.2g})") if "ok" in r
                            else "failed" for r in (tex, buf))
        rows.append((name, run.launches if run else "-", run.images if run else "-",
                     run.copies if run else "-", _ms(tex), _ms(buf), ratio, matches))
    print_columns(header, rows)
    for name, row in results.items():
        for build_name in BUILDS:
            result = row[build_name]
            if "error" in result:
                print(f"\n{name} ({build_name}) failed: {result['error']}")
                continue
            print(f"\n{name} ({build_name}), slowest commands:")
            for t in sorted(result["times"], key=lambda t: -t.seconds)[:top]:
                print(f"  {t.seconds * 1e3:8.3f} ms  {t.binding:<12} {t.kernel}")


def main(argv=None) -> int:
    p = replay_parser(__doc__, "networks", f"default: {' '.join(NETWORKS)}")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--top", type=int, default=3, help="slowest commands listed per build")
    args = p.parse_args(argv)
    if not args.replay:  # a replay names the folders an export wrote
        refuse_unknown(p, args.networks, NETWORKS, "network")
    else:
        try:
            names = exported_models(replay_folder(p, args.replay), args.networks)
        except TexscopeError as err:
            p.error(str(err))
    if args.export:
        export(Path(args.export), {name: functools.partial(network, name)
                                   for name in args.networks or NETWORKS}, args.target)
        return 0
    device = pick_device(args.device)
    if args.replay:
        results = measure_exported(Path(args.replay), names, device, args.repeat)
    else:
        results = measure_here(args.networks or NETWORKS, device, args.repeat, args.target)
    built = built_at(Path(args.replay)) if args.replay else ""
    with Recorded(args.markdown, "opencl_run.py", device_line(device), built=built):
        print(f"device: {device_line(device)}" + (f"; {built}" if built else ""))
        if "Portable Computing Language" in device.platform.name:
            print("PoCL runs on the CPU: the times show that image kernels run, not phone speed.")
        print_table(results, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
