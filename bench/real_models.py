"""Published mobile models: MediaPipe 0.10.14's .tflite files, TVM's own
Adreno build beside texscope's.

Per model that TVM's TFLite frontend imports (the corpus comes from
``texscope.models.corpus``; the others are listed with texscope's error):

- ``tvm``: TVM's own flow, ``tvm.compile`` with
  ``relax.backend.adreno.get_default_pipeline`` and the same TIR pipeline fix
  texscope uses: its kernels, images and copies, or the first line of its crash.
- ``texscope``: texscope's build for the target (limited to the OpenCL
  device's images), run once on that device and compared with the CPU:
  kernels, launches, images, copies run, conv data inputs read from texture,
  max abs error over the output's largest magnitude against the CPU build of
  the same module (MISMATCH from 2e-4, as the tests) and against TFLite's own
  interpreter on the same inputs (where ``ai-edge-litert`` is installed: it
  checks the import too), and build time by stage (one build each: these
  take seconds, the stage split is what to read).

Run: ``python bench/real_models.py [--target mali-opencl] [model ...]``
"""

from __future__ import annotations

import argparse
import importlib.util

import tvm

import texscope
from texscope import opencl
from texscope.diagnostics import verify
from texscope.backend import upstream
from texscope.opencl.source import kernel_signatures
from texscope.models.corpus import mediapipe_models
from texscope.errors import TexscopeError
from texscope.frontend.tflite_model import load_tflite
from _cli import Recorded, add_markdown_option, device_line, refuse_unknown

STAGES = ("convert_layout", "annotate", "optimize", "codegen")


def tvm_own(mod, target) -> str:
    """TVM's own Adreno build: kernels / images / copies, or its crash."""
    try:
        source, before_lowering = upstream.adreno_build(mod, target)
    except Exception as err:  # TVM raises anything; the first line says what
        lines = [line for line in str(err).splitlines() if line.strip()]
        return f"crash: {type(err).__name__}: {(lines or [''])[-1].strip()[:70]}"
    kernels = kernel_signatures(source)
    images = sum("image2d" in params for params in kernels.values())
    copies = texscope.plan_cost(before_lowering, target).copies
    return f"{len(kernels)} kernels, {images} with images, {copies} copies"


def tflite_outputs(path, inputs) -> list | str | None:
    """What TFLite's interpreter computes (None without ai-edge-litert; why
    not where it cannot run the model)."""
    if importlib.util.find_spec("ai_edge_litert") is None:
        return None
    try:
        return verify.tflite_outputs(path, inputs)
    except TexscopeError as err:  # no kernel for a custom operator
        return "cannot run: " + str(err).rsplit(": ", 1)[-1]


def texscope_row(mod, target, path) -> dict:
    result = texscope.build(mod, target)
    figures = result.report.build
    inputs = verify.random_inputs(mod)
    run = opencl.run(result, inputs)
    # Error relative to each output's largest magnitude (outputs reach 1315).
    error = verify.compare(run.outputs, verify.reference_outputs(mod, inputs)).max_scaled_error
    from_tflite = tflite_outputs(path, inputs)
    return {
        "kernels": figures["kernels"],
        "launches": len(run.times) - run.copies,
        "images": run.images,
        "copies": run.copies,
        "conv_tex": f"{figures['convs_reading_texture']}/{figures['convs']}",
        "error": f"{error:.1e}{'' if error < 2e-4 else ' MISMATCH'}",
        "tflite_error": "-" if from_tflite is None else from_tflite if isinstance(from_tflite, str)
                        else f"{verify.compare(run.outputs, from_tflite).max_scaled_error:.1e}",
        **{stage: figures.get(f"{stage}_s", 0.0) for stage in STAGES},
    }


def run(names, base: str) -> None:
    device = opencl.default_device()
    target = tvm.target.Target(opencl.device_target(device, base), host="llvm")
    print(f"target {base}, limited to {device.name.strip()}'s images; "
          "times in seconds, one build each\n")
    print("| model | TVM's own Adreno build | kernels | launches | images | copies | "
          "conv data from texture | max error / output scale | against TFLite | "
          + " | ".join(STAGES) + " |")
    print("|---" * (9 + len(STAGES)) + "|")
    models = mediapipe_models()
    for name in names or sorted(models):
        try:
            mod = load_tflite(models[name])
        except TexscopeError as err:
            reason = str(err).split(": ", 1)[1]
            print(f"| {name} | not imported: {reason[:110]} |" + " |" * (8 + len(STAGES)))
            continue
        row = texscope_row(mod, target, models[name])
        # A fresh import: after TVM's pipeline crashed on a module, texscope's
        # stage 1 fails on that same module object (TVM's passes changed it).
        upstream = tvm_own(load_tflite(models[name]), target)
        print(f"| {name} | {upstream} | {row['kernels']} | {row['launches']} | {row['images']} | "
              f"{row['copies']} | {row['conv_tex']} | {row['error']} | {row['tflite_error']} | "
              + " | ".join(f"{row[s]:.1f}" for s in STAGES) + " |", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="model names (default: all 14)")
    parser.add_argument("--target", default="adreno-opencl")
    add_markdown_option(parser)
    args = parser.parse_args()
    refuse_unknown(parser, args.models, sorted(mediapipe_models()))
    with Recorded(args.markdown, "real_models.py", device_line(opencl.default_device()),
                  raw=True):
        run(args.models, args.target)
