"""Shared checks: every pass leaves its input alone and returns well-formed IR."""

import contextlib
import copy
import os
from unittest import mock

import pytest
import tvm
import tvm_ffi
from tvm import s_tir
from tvm.s_tir import dlight
from hypothesis import HealthCheck, settings
from tvm import relax

from texscope.backend.schedules import thread_blocks
from texscope.knowledge import profile as cost_profile

# The fuzzer's profiles: "ci" by default, "long" with --hypothesis-profile long
# (TEXSCOPE_FUZZ_EXAMPLES sets how long).
for _name, _examples in (("ci", 200), ("long", int(os.environ.get("TEXSCOPE_FUZZ_EXAMPLES", 5000)))):
    settings.register_profile(
        _name, max_examples=_examples, deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
settings.load_profile("ci")

ADRENO = tvm.target.Target("qcom/adreno-opencl-texture")
VULKAN = tvm.target.Target("qcom/adreno-vulkan-texture")
# An Adreno-like target with tiny limits, so small test tensors can exceed them.
TINY = tvm.target.Target(
    {
        "kind": "opencl",
        "keys": ["adreno", "opencl", "gpu", "texture"],
        "device": "adreno",
        "texture_spatial_limit": 64,
        "texture_depth_limit": 16,
    }
)


def conv_reads_pay():
    """The Adreno defaults, but a packed conv's texture read saves 16 bytes per
    byte read: enough for the small test tensors' conv reads to pay for a copy
    (and its launch, 64 KiB's worth).  With the defaults' 1.0 a conv reads a
    buffer rather than a copy of it; the tests of copies use this profile."""
    document = copy.deepcopy(dict(cost_profile.default("adreno").document))
    for name in ("packed_conv", "pointwise_conv", "depthwise_conv"):
        document["kernels"][name]["read_gain"] = {"value": 16.0, "source": "tests: reads pay"}
    return cost_profile.from_document(document, "conv reads pay")


def run_pass(pass_, mod: tvm.IRModule) -> tvm.IRModule:
    """Run a pass, check the result is well formed and the input untouched."""
    before = tvm.ir.load_json(tvm.ir.save_json(mod))
    out = pass_(mod)
    relax.analysis.well_formed(out)
    tvm.ir.assert_structural_equal(mod, before)
    return out


@tvm.instrument.pass_instrument
class BeforeScheduling:
    """Keeps the module a build schedules (the first ScheduleKernels' input)."""

    def __init__(self):
        self.module = None

    def run_before_pass(self, mod, info):
        if info.name == "texscope.ScheduleKernels" and self.module is None:
            self.module = tvm.IRModule(dict(mod.functions), attrs=mod.attrs)


def threads_per_block(mod) -> int | None:
    """The ``threadIdx.x`` extent of a scheduled kernel (None without one)."""
    found = []

    def on_loop(loop):
        if loop.thread_binding is not None and loop.thread_binding.thread_tag == "threadIdx.x":
            found.append(int(loop.extent))
        return loop

    tvm_ffi.structural_map(mod, (tvm.tirx.For, on_loop))
    return found[0] if found else None


def tally_same_schedule(seen: dict, ours: tvm.IRModule, theirs: tvm.IRModule) -> None:
    """Check that texscope's rule scheduled a kernel as TVM's did, and count
    it in ``seen``: scheduled, guarded, on fewer threads than TVM's 256."""
    tvm.ir.assert_structural_equal(ours, theirs)
    seen["scheduled"] += 1
    seen["guarded"] += "T.where" in ours.script()
    seen["fewer_threads"] += threads_per_block(ours) < 256


@pytest.fixture
def tvms_thread_count(monkeypatch):
    """texscope's schedules split over the target's full thread block, as
    TVM's rules do, not over whole rows (texscope.backend.schedules.thread_blocks):
    where the block does not divide the work, their guards are TVM's."""
    monkeypatch.setattr(thread_blocks, "aligned_threads", lambda _extents, limit: limit)


@contextlib.contextmanager
def tvms_thread_split():
    """Within it, TVM's rules split a fused loop over texscope's threads per
    block (texscope.backend.schedules.thread_blocks: whole rows of the loops fused)
    instead of their 256; all else is their own."""
    fuse, split = s_tir.Schedule.fuse, s_tir.Schedule.split
    fused = []  # (the fused loop's variable, the extents fused into it)

    def recording(self, *loops, **kwargs):
        extents = [self.get(loop).extent for loop in loops]
        result = fuse(self, *loops, **kwargs)
        fused.append((self.get(result).loop_var, extents))
        return result

    def texscopes(self, loop, factors, *args, **kwargs):
        if list(factors) == [None, 256]:
            var = self.get(loop).loop_var
            extents = next((e for v, e in fused if v.same_as(var)), None)
            if extents is not None:
                factors = [None, thread_blocks.aligned_threads(extents, 256)]
        return split(self, loop, factors, *args, **kwargs)

    with mock.patch.object(s_tir.Schedule, "fuse", recording), \
            mock.patch.object(s_tir.Schedule, "split", texscopes):
        yield


def dlight_scheduled(mod: tvm.IRModule, *rules) -> tvm.IRModule:
    """dlight's ``ApplyDefaultSchedule(*rules)`` of a copy of ``mod`` (it
    writes the scheduled kernels into the module it is given)."""
    return dlight.ApplyDefaultSchedule(*rules)(
        tvm.IRModule(dict(mod.functions), attrs=mod.attrs, global_infos=mod.global_infos))


def with_ty_args(mod: tvm.IRModule) -> tvm.IRModule:
    """Copy each Relax operator binding's annotated type into its call's ty_args.

    TVMScript cannot parse ``ty_args`` on operator calls such as
    ``R.nn.conv2d``, so expected modules write the type on the binding.
    """
    functions = dict(mod.functions)
    builder = relax.BlockBuilder(mod)
    for gvar, func in mod.functions.items():
        if not isinstance(func, relax.Function):
            continue
        blocks = []
        for block in func.body.blocks:
            bindings = []
            for binding in block.bindings:
                value = binding.value
                if (
                    isinstance(value, relax.Call)
                    and isinstance(value.op, tvm.ir.Op)
                    and not value.op.name.startswith("relax.call_tir")
                    and value.op.name not in ("relax.to_vdevice", "relax.hint_on_device")
                ):
                    value = builder.normalize(
                        relax.Call(value.op, value.args, value.attrs, [binding.var.ty])
                    )
                    binding = relax.VarBinding(binding.var, value)
                bindings.append(binding)
            blocks.append(type(block)(bindings))
        body = builder.normalize(relax.SeqExpr(blocks, func.body.body))
        functions[gvar] = relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs)
    return tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos)


def bindings(mod: tvm.IRModule, function: str = "main"):
    for block in mod[function].body.blocks:
        yield from block.bindings


def scopes(mod: tvm.IRModule, function: str = "main") -> dict[str, str]:
    """Memory scope of every tensor variable (params and bindings) of a function.

    Only for functions whose variable names are unique.
    """
    found = {}
    variables = list(mod[function].params) + [b.var for b in bindings(mod, function)]
    for var in variables:
        ty = var.ty
        if isinstance(ty, relax.TensorType) and ty.vdevice is not None:
            assert var.name not in found, f"{var.name} names two variables"
            found[var.name] = str(ty.vdevice.memory_scope)
    return found


def copies(mod: tvm.IRModule, function: str = "main") -> list[str]:
    """Names of the to_vdevice copies a function makes."""
    return [
        b.var.name
        for b in bindings(mod, function)
        if isinstance(b.value, relax.Call)
        and isinstance(b.value.op, tvm.ir.Op)
        and b.value.op.name == "relax.to_vdevice"
    ]


@pytest.fixture(scope="session")
def mediapipe():
    """MediaPipe 0.10.14's .tflite models by name, downloaded once (see texscope.models.corpus)."""
    from texscope.models.corpus import mediapipe_models

    return mediapipe_models()


def pytest_collection_modifyitems(config, items):
    """Tests marked ``real_models`` (every MediaPipe model on every target,
    minutes) run only when asked for: ``python -m pytest -m real_models``;
    those also marked ``default_run`` (one model, so that the default run
    sees real models too) run always."""
    if "real_models" in (config.option.markexpr or ""):
        return
    skip = pytest.mark.skip(reason="heavy: run with -m real_models")
    for item in items:
        if "real_models" in item.keywords and "default_run" not in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def split_recorder(monkeypatch):
    """``start()`` records, from then on, whether each split of texscope's
    schedules ran unguarded (``disable_predication``); returns the list."""
    from texscope.backend.schedules.kernels import UncheckedSchedule

    def start() -> list:
        calls = []
        split = UncheckedSchedule.split

        def recording(self, loop, factors, preserve_unit_iters=True, disable_predication=False):
            calls.append(disable_predication)
            return split(self, loop, factors, preserve_unit_iters, disable_predication)

        monkeypatch.setattr(UncheckedSchedule, "split", recording)
        return calls

    return start
