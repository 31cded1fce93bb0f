"""The ``texscope`` command: build, demo, explain, run, calibrate, tune, ops."""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
import textwrap
from pathlib import Path

import attrs
import numpy as np
import tvm

from .knowledge import profile as cost_profile
from .knowledge import registry
from .models import zoo
from .backend.build import THREADED_PASSES, build
from .backend.parallel import build_jobs, jobs_limit
from .errors import TexscopeError, exit_status
from .frontend.input_shapes import parse_input_shape, with_input_shapes
from .frontend.model_file import PRINTED_HEADER, load_model
from .backend.outdir import check_output_dir, record_written, written_before
from .knowledge.targets import texture_target
from .ir.quiet import quiet_native_stderr

DEMO_DIR = "texscope-demo"
MODEL_HELP = ("a .py file defining a TVMScript IRModule, an .onnx or a .tflite file, or a .pt2 "
              "file (torch.export.save)")
TARGET_HELP = "adreno-opencl, adreno-vulkan, mali-opencl, nvidia-opencl, a TVM tag, or target JSON"
# Not --profile: that one times the build's stages.
COST_PROFILE_HELP = ("cost profile the planner weighs (a file `texscope calibrate` wrote on the "
                     "device); default: the target preset's built-in guesses. Named "
                     "--cost-profile because --profile times the build")
INPUT_SHAPE_HELP = ("the shape of an input the model gives a rank but no shape "
                    "(R.Tensor(dtype='float32', ndim=4)): --input-shape x=1,16,28,28")
TUNING_HELP = ("a tuning file `python -m texscope.opencl.tune` measured on the device for this "
               "model and target: the plan of least measured kernel and copy time")
LIFT_WEIGHTS_HELP = ("pack the weights once, at load: what the model computes from its weights "
                     "alone goes into <function>_transform_params, and the function takes the "
                     "packed weights (its parameters after num_input, the attribute that must "
                     "say which are weights)")


def _texture_target(spec, profile=None):
    """``texture_target``, without the CUDA warning TVM prints making a
    cuda target (before texscope says it has no textures)."""
    with quiet_native_stderr():
        return texture_target(spec, profile)


def _print_stage(stage: str, seconds: float) -> None:
    print(f"  {stage:<15} {seconds * 1e3:8.1f} ms", flush=True)


def _print_summary(result) -> None:
    summary = result.report.summary()
    print(f"tensors: {summary['in_texture']} in texture, {summary['in_buffer']} in buffers "
          f"(of {summary['tensors']})")
    print(f"copies: {summary['planned_copies']} planned ({summary['planned_copy_bytes']} bytes), "
          f"{summary['copies_left']} left after fusion")
    if "kernels" in summary:
        print(f"kernels: {summary['kernels']}, {summary['kernels_with_images']} reading or writing images")
    if "codegen" in summary:
        print(f"code generation {summary['codegen']}")
    threads = result.report.build.get("jobs")
    print(f"build time: {summary['build_s'] * 1e3:.1f} ms"
          + (f" ({threads} thread{'s' * (threads != 1)} scheduling and lowering kernels)"
             if threads else ""))


def _print_written(out_dir: Path) -> None:
    print(f"written to {out_dir}: {', '.join(written_before(out_dir))}")


def _build(model: tvm.IRModule, target: str, out: Path, host: str | None,
           profile: str | None = None, time_passes: bool = False,
           jobs: int | None = None, lift_weights: bool = False, label: str | None = None,
           name: str = "", tuning=None) -> Path:
    print(f"building for {label or target}")
    # Read before anything is written: a profiled build runs on one thread
    # and would not look at a wrong $TEXSCOPE_JOBS itself.
    with jobs_limit(jobs):
        threads = build_jobs()
    if profile is not None:
        profile = cost_profile.load(profile)
        print(f"cost profile {profile.describe()}")
    result = build(model, target, host=host, log=_print_stage, profile=profile,
                   time_passes=time_passes, jobs=jobs, lift_weights=lift_weights, tuning=tuning)
    out_dir = result.export(out, name)
    _print_summary(result)
    if tuning is not None:
        _print_tuning(result.report)
    if time_passes:
        from .diagnostics.pass_timing import render

        print("time per pass, the passes' own time (without the passes they run), costliest first:")
        print(render(list(result.pass_times), result.report.build["build_s"],
                     threaded=THREADED_PASSES, jobs=threads))
    return out_dir


def _print_tuning(report) -> None:
    """What a tuning file priced in a build, and the plan it kept."""
    print(f"tuning {report.build['tuning']}: {len(report.kernels)} kernels priced by "
          f"their measured time; {len(report.untuned)} calls by the cost profile"
          + (f" ({', '.join(report.untuned[:5])}{', ...' * (len(report.untuned) > 5)})"
             if report.untuned else ""))
    for verdict in report.verdicts:
        print(f"  {verdict.function}: {verdict.reason}")


def _model(args) -> tvm.IRModule:
    """The model file the command names, its unshaped inputs given shapes."""
    shapes = dict(parse_input_shape(item) for item in args.input_shape)
    model = load_model(args.model, args.module)
    try:
        return with_input_shapes(model, shapes)
    except TexscopeError as err:
        raise TexscopeError(f"{args.model}: {err}") from None


def _model_name(args) -> str:
    """The model as reports title it: its file's name, and the module's."""
    return Path(args.model).name + (f" ({args.module})" if args.module else "")


def cmd_build(args) -> None:
    _texture_target(args.target)  # a bad target is no fault of the model
    if args.jobs is not None and args.jobs < 1:
        raise TexscopeError(f"--jobs {args.jobs}: expected a whole number of threads, 1 or more")
    out = check_output_dir(args.output, args.force)
    tuning = _tuning_file(args.tuning)
    model = _model(args)
    target, label = args.target, None
    if args.fit_device is not None:
        from .opencl.source import device_target, pick_device

        device = pick_device(args.fit_device)
        target = device_target(device, args.target)
        label = (f"{args.target} (texture limits {target['texture_spatial_limit']} x "
                 f"{target['texture_depth_limit']}, to fit {device.name.strip()})")
    try:
        _print_written(_build(model, target, out, args.host, args.cost_profile,
                              args.profile, args.jobs, args.lift_weights, label,
                              _model_name(args), tuning))
    except TexscopeError as err:
        raise TexscopeError(f"{args.model}: {err}") from None


def _tuning_file(path):
    """A tuning file read and checked before anything is built (None: none)."""
    if path is None:
        return None
    from .opencl import tuning

    return tuning.load(path) | {"origin": str(path)}


def cmd_tune(args) -> None:
    from .backend.tuning import tuning_set

    texture_target(args.target)
    out = Path(args.output)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise TexscopeError(f"{out} exists and is not an empty folder; not writing into it")
    previous = _tuning_file(args.tuning)
    model = load_model(args.model, args.module)
    try:
        path = tuning_set.export(model, args.target, out, Path(args.model).stem,
                                 previous=previous)
    except TexscopeError as err:
        raise TexscopeError(f"{args.model}: {err}") from None
    print(f"tuning set written to {path.parent}: time it on the device with "
          f"`python -m texscope.opencl.tune {path.parent} -o tuning.json` (numpy and pyopencl "
          f"only), then `texscope build {args.model} --tuning tuning.json`")


def cmd_calibrate(args) -> int:
    if args.export_kernels:
        # Building needs TVM, so it lives here rather than in opencl.calibrate
        # (which runs on devices without TVM).
        from .backend.tuning import kernel_set

        path = kernel_set.export(args.export_kernels, args.shapes or kernel_set.DEFAULT_SHAPES,
                                 args.target)
        print(f"kernel set written to {path.parent}: carry it to the device and run "
              f"`texscope calibrate --kernels {path.parent} -o profile.json` there "
              "(or `python -m texscope.opencl.calibrate`, without TVM)")
        return 0
    from .opencl import calibrate

    return calibrate.run_command(args)


def cmd_demo(args) -> None:
    # Not a temporary directory: nothing would remove it.  ./texscope-demo
    # is the demo's own, written again by the next demo.
    out = check_output_dir(args.output or Path(DEMO_DIR).absolute(), args.force)
    print("demo: a ResNet-style block (conv, batch norm, relu, max pool, residual adds, dense)")
    model = zoo.resnet_style(blocks=2)
    _build(model, "adreno-opencl", out, None, name="the demo's ResNet-style block")
    # The model as a file, for `texscope explain` and `texscope build`.
    (out / "model.py").write_text(PRINTED_HEADER + "\n" + model.script(show_meta=False))
    record_written(out, ["model.py"])
    _print_written(out)
    print(f"open {out / 'report.html'} in a browser: every tensor's scope and why, and the graph")
    print(f"explain it: texscope explain {out / 'model.py'} --tensor lv3 --svg graph.svg")


def cmd_explain(args) -> None:
    from .diagnostics.explain import explain, graph_svg, require_graphviz

    if args.svg:
        require_graphviz()
        if not Path(args.svg).parent.is_dir() or Path(args.svg).is_dir():
            raise TexscopeError(f"cannot write the graph to {args.svg}: name a file in an "
                                "existing directory")
    if Path(args.model).is_dir():
        report = _built_report(Path(args.model))
    else:
        report = _planned_report(args)
    print(explain(report, args.tensor))
    if report.kernels or report.untuned or report.verdicts:
        print("\n".join(report.kernel_lines()).strip("\n"))
    if args.svg:
        print(f"graph: {graph_svg(report, args.svg, focus=args.tensor)}")


def _built_report(directory: Path):
    """The report of a build directory, as ``texscope build -o`` wrote it."""
    from .diagnostics.report import Report

    if "report.json" not in written_before(directory):
        raise TexscopeError(f"{directory} is a directory but no build's: give a model file, or "
                            "a directory `texscope build -o` wrote (it has report.json)")
    try:
        return Report.from_json((directory / "report.json").read_text())
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise TexscopeError(f"{directory / 'report.json'}: not a report texscope can read "
                            f"({type(err).__name__}: {err})") from None


def _planned_report(args):
    """The report of planning the model file's storage, without building it."""
    from .frontend.naming import ConvertKeepingNames
    from .pipeline import annotate_module
    from .diagnostics.report import Report
    from .rewrites.lift_weights import LiftWeightTransforms

    texture = _texture_target(args.target, args.cost_profile)
    tuning = _tuning_file(args.tuning)
    model = _model(args)
    try:
        if tuning is not None:
            from .backend.tuning.measured import measured_costs
            from .knowledge.targets import host_target

            device = tvm.target.Target(texture.target, host=host_target(None, texture.target))
            texture = attrs.evolve(texture, tuning=measured_costs(model, device, texture, tuning))
        packed = ConvertKeepingNames(texture.target)(model)
        if args.lift_weights:
            packed = LiftWeightTransforms(packed)
        _, plans = annotate_module(packed, texture)
    except TexscopeError as err:
        raise TexscopeError(f"{args.model}: {err}") from None
    return attrs.evolve(Report.from_plans(args.target, plans), model=_model_name(args))


def _read_inputs(path: str, model) -> list:
    """``--inputs``: main's inputs from an ``.npz``, by parameter name or in
    order (``arr_0``, ... as ``numpy.savez`` names them), checked against
    main's dtypes and ranks before the build."""
    from .opencl.replay import read_arrays

    params = model["main"].params
    arrays = read_arrays(path, tuple(p.name for p in params), "inputs")
    for param, array in zip(params, arrays):
        ty = param.ty
        if str(array.dtype) != str(ty.dtype) or array.ndim != int(ty.ndim):
            raise TexscopeError(f"{path}: input {param.name} is a {array.ndim}-D {array.dtype} "
                                f"array; main takes a {int(ty.ndim)}-D {ty.dtype} tensor")
        shape = getattr(ty.shape, "values", None)
        static = [int(d) for d in shape or () if isinstance(d, tvm.tirx.IntImm)]
        if shape is not None and len(static) == len(shape) and list(array.shape) != static:
            raise TexscopeError(f"{path}: input {param.name} has shape {list(array.shape)}; "
                                f"main takes {static}")
    return arrays


def _sizes(given: list[str], model, required: bool = True) -> dict[str, int]:
    """``--size NAME=N`` values, checked against main's symbolic sizes before
    the build (which takes minutes on a real model); not ``required`` where
    the inputs come from a file (their shapes give the sizes)."""
    sizes = {}
    for item in given:
        name, _, value = item.partition("=")
        if not name.isidentifier() or not value.isdigit() or int(value) < 1:
            raise TexscopeError(f"--size {item}: expected NAME=N with N a positive integer")
        sizes[name] = int(value)
    symbolic = [str(d.name) for p in model["main"].params
                for d in getattr(getattr(p.ty, "shape", None), "values", ())
                if isinstance(d, tvm.ir.Var)]
    missing = sorted(set(symbolic) - set(sizes))
    if missing and required:
        raise TexscopeError(f"main's inputs have symbolic sizes ({', '.join(missing)}): give "
                            f"each with --size, e.g. --size {missing[0]}=224")
    unknown = sorted(set(sizes) - set(symbolic))
    if unknown:
        raise TexscopeError(f"--size {unknown[0]}: main's inputs have no size of that name "
                            f"({', '.join(sorted(set(symbolic))) or 'all are static'})")
    return sizes


def _against_tflite(path: str, outputs, inputs, tolerance: float):
    """The run's outputs against TFLite's own interpreter on the model file,
    which checks the import as well (None where ai-edge-litert is missing
    or cannot run the model)."""
    from .diagnostics import verify

    if importlib.util.find_spec("ai_edge_litert") is None:
        print("against TFLite's interpreter: not compared (pip install ai-edge-litert)")
        return None
    try:
        expected = verify.tflite_outputs(path, inputs)
    except TexscopeError as err:  # the interpreter lacks a kernel the import has
        print(f"against TFLite's interpreter: not compared ({err})")
        return None
    check = verify.compare(outputs, expected, rtol=tolerance, atol=tolerance, of_scale=True)
    print(check.line("TFLite's interpreter"))
    return check


def cmd_run(args) -> int:
    from . import opencl
    from .diagnostics import verify

    kind = _texture_target(args.target).kind
    if kind != "opencl":
        raise TexscopeError(
            f"texscope run runs OpenCL kernels, and {kind} kernels cannot be built or run with "
            f"this TVM (it has no {'SPIR-V' if kind == 'vulkan' else kind} code generator); "
            f"`texscope build --target {args.target}` still writes the plan and report")
    model = _model(args)
    if args.save_outputs and Path(args.save_outputs).exists():
        raise TexscopeError(f"{args.save_outputs} exists; --save-outputs writes only new files")
    given = _read_inputs(args.inputs, model) if args.inputs else None
    sizes = _sizes(args.size, model, required=given is None)
    tuning = _tuning_file(args.tuning)
    device = opencl.default_device()
    if tuning is not None and tuning["device"]["name"].strip() != device.name.strip():
        raise TexscopeError(f"{args.tuning} was measured on {tuning['device']['name'].strip()!r}, "
                            f"and this run's device is {device.name.strip()!r}: tune on the "
                            "device the model runs on")
    # Textures must fit this device's images as well as the target's.
    target = opencl.device_target(device, args.target)
    print(f"building for {args.target} (texture limits {target['texture_spatial_limit']} x "
          f"{target['texture_depth_limit']}, to fit {device.name.strip()})")
    try:
        result = build(model, target, log=_print_stage, profile=args.cost_profile,
                       lift_weights=args.lift_weights, tuning=tuning)
    except TexscopeError as err:
        raise TexscopeError(f"{args.model}: {err}") from None
    if tuning is not None:
        _print_tuning(result.report)
    print(f"outputs: {', '.join(opencl.plan_of(result).outputs)}")
    inputs = given or verify.random_inputs(model, seed=args.seed, sizes=sizes)
    if args.lift_weights:
        print("main takes the packed weights: main_transform_params computed on the CPU")
    run = opencl.run(result, verify.lifted_inputs(model, inputs, target) if args.lift_weights
                     else inputs, device)
    check = verify.compare(run.outputs, verify.reference_outputs(model, inputs),
                           rtol=args.tolerance, atol=args.tolerance, of_scale=True)
    print(f"ran on {device.name.strip()} ({device.platform.name.strip()}): "
          f"{len(run.times) - run.copies} kernel launches, {run.copies} copies, "
          f"{run.images} images")
    print(check.line("the CPU (llvm)"))
    checks = [check]
    if Path(args.model).suffix == ".tflite":
        against = _against_tflite(args.model, run.outputs, inputs, args.tolerance)
        checks += [against] if against is not None else []
    if args.save_outputs:
        names = opencl.plan_of(result).outputs
        np.savez(args.save_outputs, **dict(zip(names, run.outputs)))
        print(f"outputs written to {args.save_outputs} ({', '.join(names)})")
    if Path(args.model).suffix == ".pt2":
        from .frontend.torch_model import eager_outputs

        check = verify.compare(run.outputs, eager_outputs(args.model, inputs),
                               rtol=args.tolerance, atol=args.tolerance, of_scale=True)
        print(check.line("PyTorch (eager)"))
        checks.append(check)
    total = run.seconds
    print(f"time per command, slowest first (total {total * 1e3:.3f} ms):")
    for timed in run.slowest()[:args.top]:
        print(f"  {timed.seconds * 1e3:9.3f} ms  {timed.binding:<12} {timed.kernel}")
    if len(run.times) > args.top:
        print(f"  ... {len(run.times) - args.top} more (--top N shows more)")
    return 0 if all(c.ok for c in checks) else 1


def cmd_ops(_args) -> None:
    rows = [("entry", "matches", "inputs", "outputs", "priced as", "why")]
    for entry in registry.entries():
        rows.append((
            entry.name, entry.key.describe(),
            ", ".join("/".join(sorted(s.value for s in r)) for r in entry.inputs) + " ...",
            ", ".join("/".join(sorted(s.value for s in r)) for r in entry.outputs),
            entry.cost_class or "-",
            entry.note,
        ))
    # One entry a paragraph, wrapped to the terminal: its columns as
    # "name: value" lines, the note last.
    width = max(shutil.get_terminal_size().columns, 40)
    for row in rows[1:]:
        print(row[0])
        for label, value in zip(rows[0][1:], row[1:]):
            print(textwrap.fill(value, width, initial_indent=f"  {label + ':':<11}",
                                subsequent_indent=" " * 13, break_on_hyphens=False))
    print()
    print(textwrap.fill("'...': the last input repeats for further operands. Tensors that "
                        "cannot be textures are read and written as buffers by every kernel. "
                        "'priced as': the kernel class whose prices the cost profile gives "
                        "(docs/costs.md).", width))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="texscope", description="texture or buffer, for every tensor of a TVM Relax model on mobile GPUs")
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("build", help="build a model for a mobile GPU")
    p.add_argument("model", help=MODEL_HELP)
    p.add_argument("--target", default="adreno-opencl", help=TARGET_HELP)
    p.add_argument("--module", help="which IRModule of the file (default: the only one)")
    p.add_argument("--host", help="host target (default llvm at opt-level 0: host code only launches kernels); "
                   "set TEXSCOPE_NDK_CC to cross-compile")
    p.add_argument("-o", "--output", required=True,
                   help="output directory: new, empty, or one texscope wrote before")
    p.add_argument("--force", action="store_true",
                   help="write into a non-empty directory texscope did not write")
    p.add_argument("--cost-profile", help=COST_PROFILE_HELP)
    p.add_argument("--profile", action="store_true",
                   help="print the time each pass of the build took, costliest first "
                        "(built on one thread, so that each pass's time is its own)")
    p.add_argument("-j", "--jobs", type=int,
                   help="threads that schedule and lower kernels (default: $TEXSCOPE_JOBS, "
                        "else one per CPU); the output is the same whatever the number")
    p.add_argument("--lift-weights", action="store_true", help=LIFT_WEIGHTS_HELP)
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0,D1,...",
                   help=INPUT_SHAPE_HELP)
    p.add_argument("--fit-device", nargs="?", const=0, type=int, metavar="N",
                   help="keep textures within the images OpenCL device N (default 0; "
                        "python -m texscope.opencl.replay --list-devices lists them) takes")
    p.add_argument("--tuning", help=TUNING_HELP)
    p.set_defaults(run=cmd_build)
    p = commands.add_parser("demo", help="build the bundled ResNet-style block for Adreno OpenCL")
    p.add_argument("-o", "--output", help="output directory: new, empty, or one texscope wrote "
                                           f"before (default: {DEMO_DIR} in the current one)")
    p.add_argument("--force", action="store_true",
                   help="write into a non-empty directory texscope did not write")
    p.set_defaults(run=cmd_demo)
    p = commands.add_parser("explain", help="why every tensor went where it went")
    p.add_argument("model", help=MODEL_HELP + ", or a directory `texscope build -o` wrote "
                                  "(its report, no planning again)")
    p.add_argument("--target", default="adreno-opencl", help=TARGET_HELP)
    p.add_argument("--module", help="which IRModule of the file (default: the only one)")
    p.add_argument("--tensor", help="only this tensor and its neighbours (in the table and "
                                    "the --svg picture)")
    p.add_argument("--svg", help="also draw the graph into this SVG file (needs Graphviz)")
    p.add_argument("--cost-profile", help=COST_PROFILE_HELP)
    p.add_argument("--lift-weights", action="store_true", help=LIFT_WEIGHTS_HELP)
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0,D1,...",
                   help=INPUT_SHAPE_HELP)
    p.add_argument("--tuning", help=TUNING_HELP)
    p.set_defaults(run=cmd_explain)
    p = commands.add_parser("run", help="build, run once on the default OpenCL device, "
                                        "compare with the CPU and time each kernel")
    p.add_argument("model", help=MODEL_HELP)
    p.add_argument("--target", default="adreno-opencl", help=TARGET_HELP)
    p.add_argument("--module", help="which IRModule of the file (default: the only one)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--tolerance", type=float, default=1e-3,
                   help="rtol of the comparisons, and atol as a fraction of each output's "
                        "largest magnitude (float32 sums in another order differ by a "
                        "fraction of an output's range)")
    p.add_argument("--size", action="append", default=[], metavar="NAME=N",
                   help="the value of a symbolic input size (R.Tensor((1, 3, 'h', 'w')): "
                        "--size h=224 --size w=224); one build runs at any size")
    p.add_argument("--top", type=int, default=15, help="how many of the slowest commands to print")
    p.add_argument("--inputs", metavar="NPZ", help="main's inputs from an .npz, by parameter "
                                                    "name or arr_0, arr_1... (default: random, "
                                                    "--seed)")
    p.add_argument("--save-outputs", metavar="NPZ", help="write the outputs here (a new file)")
    p.add_argument("--cost-profile", help=COST_PROFILE_HELP)
    p.add_argument("--lift-weights", action="store_true", help=LIFT_WEIGHTS_HELP)
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0,D1,...",
                   help=INPUT_SHAPE_HELP)
    p.add_argument("--tuning", help=TUNING_HELP)
    p.set_defaults(run=cmd_run)
    p = commands.add_parser("calibrate", help="measure what textures, buffers and copies cost "
                                              "on an OpenCL device: a cost profile for build "
                                              "--cost-profile")
    from .opencl.calibrate import add_arguments  # pyopencl is imported only when it runs

    add_arguments(p)
    p.add_argument("--export-kernels", metavar="DIR",
                   help="build the kernel set that --kernels times (needs TVM) into DIR, "
                        "and stop: small modules per kernel class, each built with its "
                        "operands in buffers and in textures")
    p.add_argument("--target", default="adreno-opencl",
                   help="the target the kernel set is built for (--export-kernels)")
    p.set_defaults(run=cmd_calibrate)
    p = commands.add_parser("tune", help="write the model's tuning set: each kernel in every "
                                         "storage the planner could choose, for "
                                         "python -m texscope.opencl.tune on the device")
    p.add_argument("model", help=MODEL_HELP)
    p.add_argument("--target", default="adreno-opencl", help=TARGET_HELP)
    p.add_argument("--module", help="which IRModule of the file (default: the only one)")
    p.add_argument("-o", "--output", required=True, help="the tuning set's folder (new or empty)")
    p.add_argument("--tuning", help="an earlier tuning file of this model: the plan it chooses "
                                    "is run whole with the set, and the next build weighs it at "
                                    "that measured time")
    p.set_defaults(run=cmd_tune)
    p = commands.add_parser("ops", help="print the operator registry")
    p.set_defaults(run=cmd_ops)
    args = parser.parse_args(argv)
    return exit_status(lambda: args.run(args) or 0, "texscope")


if __name__ == "__main__":
    sys.exit(main())
