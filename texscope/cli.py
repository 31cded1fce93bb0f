"""The ``texscope`` command: build, demo, explain, run, ops."""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path

import tvm

from . import registry, zoo
from .build import build
from .errors import TexscopeError

MODEL_HELP = "a .py file defining a TVMScript IRModule, an .onnx or a .tflite file"
TARGET_HELP = "adreno-opencl, adreno-vulkan, mali-opencl, a TVM tag, or target JSON"


def load_model(path: str, module_name: str | None = None) -> tvm.IRModule:
    """An IRModule from a Python file defining TVMScript modules, an ONNX file
    or a TFLite file (``.tflite``)."""
    file = Path(path)
    if not file.exists():
        raise TexscopeError(f"no such model file: {path}")
    if file.suffix == ".onnx":
        try:
            import onnx
            from tvm.relax.frontend.onnx import from_onnx
        except ImportError as err:
            raise TexscopeError("ONNX models need the onnx extra: pip install 'texscope[onnx]'") from err
        return from_onnx(onnx.load(str(file)), keep_params_in_input=False)
    if file.suffix == ".tflite":
        from .tflite_model import load_tflite

        return load_tflite(file)
    name = f"texscope_model_{file.stem}"
    spec = importlib.util.spec_from_file_location(name, file)
    namespace = importlib.util.module_from_spec(spec)
    # TVMScript finds a module's source through sys.modules.
    sys.modules[name] = namespace
    sys.path.insert(0, str(file.parent))
    try:
        spec.loader.exec_module(namespace)
    finally:
        sys.path.remove(str(file.parent))
    modules = {k: v for k, v in vars(namespace).items() if isinstance(v, tvm.IRModule)}
    if module_name is not None:
        if module_name not in modules:
            raise TexscopeError(f"{path} defines no IRModule named {module_name!r}; it has {sorted(modules)}")
        return modules[module_name]
    if len(modules) != 1:
        raise TexscopeError(f"{path} defines {len(modules)} IRModules {sorted(modules)}; pick one with --module")
    return next(iter(modules.values()))


def _print_stage(stage: str, seconds: float) -> None:
    print(f"  {stage:<15} {seconds * 1e3:8.1f} ms", flush=True)


def _print_summary(result, out_dir: Path) -> None:
    summary = result.report.summary()
    print(f"tensors: {summary['in_texture']} in texture, {summary['in_buffer']} in buffers "
          f"(of {summary['tensors']})")
    print(f"copies: {summary['planned_copies']} planned ({summary['planned_copy_bytes']} bytes), "
          f"{summary['copies_left']} left after fusion")
    if "kernels" in summary:
        print(f"kernels: {summary['kernels']}, {summary['kernels_with_images']} reading or writing images")
    if "codegen" in summary:
        print(f"code generation {summary['codegen']}")
    print(f"build time: {summary['build_s'] * 1e3:.1f} ms")
    print(f"written to {out_dir}: {', '.join(sorted(p.name for p in out_dir.iterdir()))}")


def _build(model: tvm.IRModule, target: str, out: str, host: str | None) -> None:
    print(f"building for {target}")
    result = build(model, target, host=host, log=_print_stage)
    _print_summary(result, result.export(out))


def cmd_build(args) -> None:
    _build(load_model(args.model, args.module), args.target, args.output, args.host)


def cmd_demo(args) -> None:
    out = Path(args.output or tempfile.mkdtemp(prefix="texscope-demo-"))
    print("demo: a ResNet-style block (conv, batch norm, relu, max pool, residual adds, dense)")
    model = zoo.resnet_style(blocks=2)
    _build(model, "adreno-opencl", str(out), None)
    # The model as a file, for `texscope explain` and `texscope build`.
    header = "from tvm.script import ir as I, relax as R, tirx as T\n\n"
    (out / "model.py").write_text(header + model.script(show_meta=False))
    print(f"explain it: texscope explain {out / 'model.py'} --svg graph.svg")


def cmd_explain(args) -> None:
    from .explain import explain, graph_svg
    from .pipeline import annotate_module
    from .report import Report
    from .targets import texture_target
    from .convert_layout import ConvertToPackedLayout

    texture = texture_target(args.target)
    packed = ConvertToPackedLayout(texture.target)(load_model(args.model, args.module))
    _, plans = annotate_module(packed, texture)
    report = Report.from_plans(args.target, plans)
    print(explain(report, args.tensor))
    if args.svg:
        print(f"graph: {graph_svg(report, args.svg)}")


def cmd_run(args) -> int:
    from . import opencl, verify

    model = load_model(args.model, args.module)
    device = opencl.default_device()
    # Textures must fit this device's images as well as the target's.
    target = opencl.device_target(device, args.target)
    print(f"building for {args.target} (texture limits {target['texture_spatial_limit']} x "
          f"{target['texture_depth_limit']}, to fit {device.name.strip()})")
    result = build(model, target, log=_print_stage)
    inputs = verify.random_inputs(model, seed=args.seed)
    run = opencl.run(result, inputs, device)
    check = verify.compare(run.outputs, verify.reference_outputs(model, inputs),
                           rtol=args.tolerance, atol=args.tolerance)
    print(f"ran on {device.name.strip()} ({device.platform.name.strip()}): "
          f"{len(run.times) - run.copies} kernel launches, {run.copies} copies, "
          f"{run.images} images")
    print(f"against the CPU (llvm): max abs error {check.max_abs_error:.3g}, "
          f"max rel error {check.max_rel_error:.3g} -> {'OK' if check.ok else 'MISMATCH'}")
    total = sum(t.seconds for t in run.times)
    print(f"time per command, slowest first (total {total * 1e3:.3f} ms):")
    for timed in run.slowest()[:args.top]:
        print(f"  {timed.seconds * 1e3:9.3f} ms  {timed.binding:<12} {timed.kernel}")
    if len(run.times) > args.top:
        print(f"  ... {len(run.times) - args.top} more (--top N shows more)")
    return 0 if check.ok else 1


def cmd_ops(_args) -> None:
    rows = [("entry", "matches", "inputs", "outputs", "why")]
    for entry in registry.entries():
        key = entry.key.describe() if entry.key is not None else "(used directly)"
        rows.append((
            entry.name, key,
            ", ".join("/".join(sorted(s.value for s in r)) for r in entry.inputs) + " ...",
            ", ".join("/".join(sorted(s.value for s in r)) for r in entry.outputs),
            entry.note,
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[4])
    print("\n'...': the last input repeats for further operands. Tensors that cannot be "
          "textures are read and written as buffers by every kernel.")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="texscope", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("build", help="build a model for a mobile GPU")
    p.add_argument("model", help=MODEL_HELP)
    p.add_argument("--target", default="adreno-opencl", help=TARGET_HELP)
    p.add_argument("--module", help="which IRModule of the file (default: the only one)")
    p.add_argument("--host", help="host target (default llvm); set TEXSCOPE_NDK_CC to cross-compile")
    p.add_argument("-o", "--output", required=True, help="output directory")
    p.set_defaults(run=cmd_build)
    p = commands.add_parser("demo", help="build the bundled ResNet-style block for Adreno OpenCL")
    p.add_argument("-o", "--output", help="output directory (default: a new temporary one)")
    p.set_defaults(run=cmd_demo)
    p = commands.add_parser("explain", help="why every tensor went where it went")
    p.add_argument("model", help=MODEL_HELP)
    p.add_argument("--target", default="adreno-opencl", help=TARGET_HELP)
    p.add_argument("--module", help="which IRModule of the file (default: the only one)")
    p.add_argument("--tensor", help="only this tensor and its neighbours")
    p.add_argument("--svg", help="also draw the graph into this SVG file (needs Graphviz)")
    p.set_defaults(run=cmd_explain)
    p = commands.add_parser("run", help="build, run once on the default OpenCL device, "
                                        "compare with the CPU and time each kernel")
    p.add_argument("model", help=MODEL_HELP)
    p.add_argument("--target", default="adreno-opencl", help=TARGET_HELP)
    p.add_argument("--module", help="which IRModule of the file (default: the only one)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--tolerance", type=float, default=1e-3, help="rtol and atol of the comparison")
    p.add_argument("--top", type=int, default=15, help="how many of the slowest commands to print")
    p.set_defaults(run=cmd_run)
    p = commands.add_parser("ops", help="print the operator registry")
    p.set_defaults(run=cmd_ops)
    args = parser.parse_args(argv)
    try:
        return args.run(args) or 0
    except TexscopeError as err:
        print(f"texscope: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
