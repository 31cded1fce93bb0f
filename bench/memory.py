"""Peak device memory: texture plans against the all-buffer build, one process.

Per model, the peak device memory one run needs (``texscope.backend.memory.device_memory``:
parameters, constants and the planned storages live at once, as the Relax VM
allocates them after TVM's memory planning and ``KillAfterLastUse``) of:

- ``all-buffer``: TVM 0.27's generic OpenCL build (``tvm.compile(mod,
  Target({"kind": "opencl"}, host="llvm"))``), every tensor a buffer;
- ``all-buffer, ours``: the same build's storages assigned by
  ``texscope.PlanStorages`` instead (applied to its module right after
  ``StaticPlanBlockMemory``): how much of texscope's figure is the planner;
- ``TVM adreno``: TVM's own Adreno texture flow (``AnnotateCustomMemoryScope``,
  ``texscope.backend.upstream.adreno_build``), its storages as TVM sizes them;
- ``texscope, TVM's planner``: ``texscope.build(mod, "adreno-opencl")`` with
  ``texscope.PlanStorages`` disabled: TVM 0.27's ``StaticPlanBlockMemory``
  assigns the storages, ``SizeTextureStorages`` sizes them (texscope before
  its own planner);
- ``texscope``: the build as it is;
- ``padding``: the texel padding a texture plan may add: the all-buffer
  plan's peak had its 4-D activations been images (channels in lanes of 4,
  rows aligned to 64 bytes; ``buffers_as_images_peak``) less its own, plus
  what texscope's folded constants grew by (weights packed to OIHW4o with
  their channels padded to texels replace the originals; ``inputs+``);
- ``ratio``: each peak over the all-buffer peak, and ``over``: what
  texscope's peak exceeds the all-buffer peak plus the padding by (the target
  is <= 0).  A weight that is a parameter (the zoo's) is packed on every run,
  beside the original: that copy is not padding and shows in ``over``
  (``--lift-weights`` packs it once, at load);
- ``pooled``: what TVM's pooled allocator (the Relax VM's default) holds
  after one run of the all-buffer build, of texscope's with TVM's planner
  and of texscope's (``pooled_bytes``: freed storages are kept for storages
  of the same page-rounded size and given back only when the device runs
  out).  texscope's planner takes the least peak first, so where holding
  the storages longer would save the pool blocks, this can be higher.

Models: texscope's zoo (weights are parameters) and the MediaPipe 0.10.14
.tflite models of ``texscope.models.corpus`` (weights are constants),
imported once by texscope's loader and given to every tool.

Run: ``python bench/memory.py [--constants | --lift-weights] [model ...]``
(a model: a zoo network, a corpus model's name, or the path of a
``.tflite`` file)
(``--constants``: the zoo's weights bound as constants, as a deployed model
has them; ``--lift-weights``: the zoo's ``main`` declaring its weights and
texscope's builds lifting their packing into ``main_transform_params``,
run once at load: ``texscope.build(..., lift_weights=True)``; the peaks are
``main``'s, whose inputs are then the packed weights).
"""

from __future__ import annotations

import argparse

import tvm
from tvm import relax

import texscope
from texscope.backend import upstream
from texscope.backend.memory.device_memory import (TVM_PLANNER, MemoryCapture, buffers_as_images_peak,
                                                   device_memory)
from texscope.backend.memory.storage_plan import PlanStorages
from texscope.ir.capture import PassCapture
from texscope.knowledge.targets import texture_target
from texscope.models import zoo
from _cli import ZOO, Columns, Recorded, add_markdown_option, chosen_models, loaded

GENERIC = tvm.target.Target({"kind": "opencl"}, host="llvm")
TEXSCOPE = "adreno-opencl"
PLANNER_PASS = "texscope.PlanStorages"
MEMORY_COLUMNS = Columns(
    ("model", -30), ("all-buffer", 10), ("all-buffer, ours", 16), ("TVM adreno", 10),
    ("ratio", 6), ("texscope, TVM planner", 21), ("ratio", 6), ("texscope", 9), ("ratio", 6),
    ("padding", 8), ("inputs+", 8), ("over", 7), None, ("pooled: all-buffer", 18),
    ("TVM planner", 11), ("texscope", 8))


def zoo_loaders(constants: bool = False, lift: bool = False) -> dict[str, object]:
    """network -> a loader of the zoo's, its weights constants or lifted as asked."""
    prepared = (zoo.with_constant_weights if constants else
                zoo.with_declared_weights if lift else lambda mod: mod)
    return {name: lambda name=name: prepared(zoo.NETWORKS[name]()) for name in ZOO}


def planned(build, *, disabled=()) -> tvm.IRModule:
    """The Relax module of ``build()`` after memory planning and kill insertion."""
    capture = MemoryCapture()
    with tvm.transform.PassContext(instruments=[capture], disabled_pass=list(disabled)):
        build()
    return capture.modules[-1]


def generic_builds(mod) -> tuple[tvm.IRModule, tvm.IRModule]:
    """TVM's generic build of ``mod`` planned by TVM, and by texscope's
    planner (the same module right after ``StaticPlanBlockMemory``, then
    what the generic pipeline runs up to ``KillAfterLastUse``)."""
    capture, before = MemoryCapture(), PassCapture(TVM_PLANNER)
    with tvm.transform.PassContext(instruments=[capture, before]):
        tvm.compile(mod, GENERIC)
    ours = tvm.transform.Sequential([PlanStorages, relax.transform.LowerAllocTensor(),
                                     relax.transform.KillAfterLastUse()])(before.modules[-1])
    return capture.modules[-1], ours


def _mib(n) -> str:
    return n if isinstance(n, str) else f"{n / 2**20:.3f}"


def channel_axis(mod: tvm.IRModule) -> int:
    """Where an activation's channels are: the data layout of the first conv."""
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            layout = getattr(getattr(binding.value, "attrs", None), "data_layout", None)
            if layout is not None and "C" in str(layout):
                return str(layout).index("C")
    return 1


def row(mod, lift: bool = False) -> dict:
    adreno = texture_target(TEXSCOPE).target
    buffers_mod, buffers_ours = generic_builds(mod)
    buffers = device_memory(buffers_mod)
    try:
        theirs = device_memory(planned(lambda: upstream.adreno_build(
            mod, tvm.target.Target(adreno, host="llvm")))).peak_bytes
    except Exception as err:  # TVM's own flow fails on some models: say so, go on
        theirs = f"{type(err).__name__}"
    before = device_memory(planned(lambda: texscope.build(mod, TEXSCOPE, lift_weights=lift),
                                   disabled=[PLANNER_PASS]))
    after = device_memory(planned(lambda: texscope.build(mod, TEXSCOPE, lift_weights=lift)))
    grown = max(0, after.inputs_bytes - buffers.inputs_bytes)
    padding = buffers_as_images_peak(buffers_mod, channel_axis(mod)) - buffers.peak_bytes + grown
    return {"all-buffer": buffers.peak_bytes, "all-buffer, ours": device_memory(buffers_ours).peak_bytes,
            "TVM adreno": theirs, "TVM planner": before.peak_bytes, "texscope": after.peak_bytes,
            "padding": padding, "inputs+": grown,
            "pooled": (buffers.pooled_bytes, before.pooled_bytes, after.pooled_bytes),
            "over": after.peak_bytes - buffers.peak_bytes - padding}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*")
    weights = parser.add_mutually_exclusive_group()
    weights.add_argument("--constants", action="store_true")
    weights.add_argument("--lift-weights", action="store_true")
    add_markdown_option(parser)
    args = parser.parse_args(argv)
    # --lift-weights: the zoo alone (the corpus's weights are constants)
    found = chosen_models(parser, args.models, zoo_loaders(args.constants, args.lift_weights),
                          corpus_too=not args.lift_weights)
    with Recorded(args.markdown, "memory.py"):
        _report(args, found)


def _report(args, found) -> None:
    print("peak device memory, MiB")
    print(MEMORY_COLUMNS.header())
    for name, mod in loaded(found, 30):
        r = row(mod, args.lift_weights)
        base = r["all-buffer"]

        def ratio(n):
            return "-" if isinstance(n, str) else f"{n / base:.2f}x"

        print(MEMORY_COLUMNS.line(
            name, _mib(base), _mib(r["all-buffer, ours"]), _mib(r["TVM adreno"]),
            ratio(r["TVM adreno"]), _mib(r["TVM planner"]), ratio(r["TVM planner"]),
            _mib(r["texscope"]), ratio(r["texscope"]), _mib(r["padding"]), _mib(r["inputs+"]),
            _mib(r["over"]), *map(_mib, r["pooled"])), flush=True)


if __name__ == "__main__":
    main()
