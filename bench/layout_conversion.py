"""Stage 1's layout conversion: texscope's rules against TVM's ConvertLayout,
same input, one process.

For each network, the module stage 1 hands its layout conversion (captured
by a pass instrument) goes through TVM's ``relax.transform.ConvertLayout``
with the registry's desired layouts and through
``texscope.rewrites.packed_layout.ConvertLayoutByRules``.  Printed: the
bindings, each tool's CPU time (median of 7, the tools alternating, garbage
collection off while timing), their ratio, whether the rules covered the
network (else texscope ran TVM's pass) and whether both modules are equal
(structurally and as TVMScript).

Run: ``python bench/layout_conversion.py [network ...]`` (zoo names or
MediaPipe model names; by default the zoo but chain1024, and the MediaPipe
models that import, those the model cache holds already).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time

import tvm
import tvm_ffi
from tvm import relax

import texscope
from texscope.ir.graph import relax_bindings
from texscope.knowledge import registry
from texscope.models import zoo
from texscope.rewrites.packed_layout import (ConversionInput, ConvertLayoutByRules,
                                              convert_layout_or_none)
from _cli import Recorded, add_markdown_option, refuse_unknown

MEDIAPIPE = ("face_detection_short_range", "face_landmark", "hand_landmark_full",
             "hand_landmark_lite", "hand_recrop", "iris_landmark", "palm_detection_full",
             "palm_detection_lite", "pose_landmark_full")


def _model(name: str) -> tvm.IRModule:
    if name in zoo.NETWORKS:
        return zoo.NETWORKS[name]()
    from texscope.frontend.tflite_model import load_tflite
    from texscope.models import corpus

    return load_tflite(corpus.mediapipe_models()[name])


def _cpu_seconds(function) -> float:
    gc.disable()
    try:
        start = time.process_time()
        function()
        return time.process_time() - start
    finally:
        gc.enable()


def measure(name: str) -> str:
    capture = ConversionInput()
    with tvm.transform.PassContext(instruments=[capture]):
        texscope.ConvertToPackedLayout("adreno-opencl")(_model(name))
    mod = capture.module
    theirs_pass = relax.transform.ConvertLayout({}, registry.desired_layouts)
    ours_pass = ConvertLayoutByRules(registry.desired_layouts)
    theirs_pass(mod), ours_pass(mod)  # warm-up
    theirs, ours = [], []
    for _ in range(7):
        theirs.append(_cpu_seconds(lambda: theirs_pass(mod)))
        ours.append(_cpu_seconds(lambda: ours_pass(mod)))
    tvm_s, texscope_s = statistics.median(theirs), statistics.median(ours)
    covered = convert_layout_or_none(mod, registry.desired_layouts) is not None
    a, b = theirs_pass(mod), ours_pass(mod)
    same = tvm_ffi.structural_equal(a, b) and a.script() == b.script()
    bindings = sum(1 for _ in relax_bindings(mod))
    return (f"{name:28s} {bindings:8d} {tvm_s * 1000:9.1f} {texscope_s * 1000:9.1f} "
            f"{texscope_s / tvm_s:6.2f}x  {'yes' if covered else 'no':7s} {'yes' if same else 'NO'}")


def main(names: list[str]) -> int:
    if not names:
        names = [n for n in zoo.NETWORKS if n != "chain1024"]
        from texscope.models import corpus

        # Only models already fetched: a bench does not download.
        cached = {path.stem for path in corpus.cache_dir().glob("*.tflite")}
        names += [n for n in MEDIAPIPE if n in cached]
    print(f"{'network':28s} {'bindings':>8s} {'TVM ms':>9s} {'ours ms':>9s} {'ratio':>7s}  "
          f"covered same")
    for name in names:
        print(measure(name), flush=True)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", metavar="model",
                        help="zoo networks or MediaPipe models (default: the zoo and the "
                             "MediaPipe models already fetched)")
    add_markdown_option(parser)
    ARGS = parser.parse_args()
    refuse_unknown(parser, ARGS.models, [*zoo.NETWORKS, *MEDIAPIPE])
    with Recorded(ARGS.markdown, "layout_conversion.py"):
        STATUS = main(ARGS.models)
    sys.exit(STATUS)
