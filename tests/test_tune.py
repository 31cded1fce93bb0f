"""texscope tune: tuning sets, tuning files, and plans of least measured time."""

import itertools
import json
import math
import os
import re
import shutil
import subprocess
import sys
import types

import attrs
import numpy as np
import pytest
import tvm
from tvm import relax

from texscope.backend.tuning import tuning_set
from modules.constant_folding import CONV_OF_CONSTANT_WEIGHTS
from texscope.backend.build import build
from texscope.backend.fusion import fuse_passes, run_under
from texscope.backend.tuning.measured import kernel_key, measured_costs, plan_profiles
from texscope.cleanup import Cleanup
from texscope.collect_consumer import collect_consumer
from texscope.convert_layout import LegalizeKeepingAttrs
from texscope.frontend.naming import ConvertKeepingNames
from texscope.define_vdevice import define_vdevice
from texscope.diagnostics.verify import check_invariants
from texscope.errors import TexscopeError
from texscope.frontend.model_file import PRINTED_HEADER
from texscope.ir.graph import CALL_TIR, TO_VDEVICE, static_shape
from texscope.diagnostics.exhaustive import every_plan
from texscope.knowledge.profile import SET_TO_MODEL
from texscope.knowledge.targets import host_target, is_texture_scope, texture_target
from texscope.opencl import tuning
from texscope.opencl.executor import plan_of
from texscope.opencl.session import KernelTime, RunResult
from texscope.opencl.tune import WHOLE_SESSIONS, measure
from texscope.pipeline import annotate_module
from texscope.planner import tuned as tuned_planner

TARGET = "adreno-opencl"


def two_convs():
    """x -> conv -> conv (constant weights): three tensors that may be
    textures, each read by one kernel."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8, 8, 8), "float32"))
    rng = np.random.default_rng(0)
    with bb.function("main", [x]):
        with bb.dataflow():
            h = x
            for _ in range(2):
                w = relax.const(rng.uniform(-0.3, 0.3, (8, 8, 3, 3)).astype("float32"))
                h = bb.emit(relax.op.nn.conv2d(h, w, padding=1))
            out = bb.emit_output(h)
        bb.emit_func_output(out)
    return bb.get()


def conv_then_pool():
    """A 1x1 conv then a max pool: the oracle's small model (four tensors
    that may be textures: the packed input, the weights, the conv's and the
    pool's outputs)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8, 8, 8), "float32"))
    w = relax.const(np.random.default_rng(1).uniform(-0.3, 0.3, (8, 8, 1, 1)).astype("float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            c = bb.emit(relax.op.nn.conv2d(x, w))
            out = bb.emit_output(bb.emit(relax.op.nn.max_pool2d(c, pool_size=3, padding=1)))
        bb.emit_func_output(out)
    return bb.get()


def one_conv():
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8, 8, 8), "float32"))
    w = relax.const(np.random.default_rng(2).uniform(-0.3, 0.3, (8, 8, 3, 3)).astype("float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.nn.conv2d(x, w, padding=1)))
        bb.emit_func_output(out)
    return bb.get()


@pytest.fixture(scope="module")
def two_convs_set(tmp_path_factory):
    root = tmp_path_factory.mktemp("tune") / "set"
    tuning_set.export(two_convs(), TARGET, root, "two_convs", log=lambda *_: None)
    return root


def synthetic(manifest: dict, seconds, spread=0.0) -> dict:
    """A tuning document for a set's manifest, ``seconds(kernel, scopes)``
    per variant and ``seconds(None, (source, target, shape))`` per copy;
    each measured within ``spread`` (a fraction) of its time, or, with
    ``spread=None``, with no spread recorded (as before it was)."""
    def timed(value):
        if spread is None:
            return {"seconds": value}
        return {"seconds": value, "min_seconds": value * (1 - spread),
                "max_seconds": value * (1 + spread)}

    kernels = {key: {"name": k["name"], "positions": k["positions"], "shapes": k["shapes"],
                     "variants": []} for key, k in manifest["kernels"].items()}
    for variant in manifest["variants"]:
        kernels[variant["kernel"]]["variants"].append(
            {"scopes": variant["scopes"], **timed(seconds(variant["kernel"], variant["scopes"]))})
    return {"format": tuning.FORMAT, "version": tuning.VERSION, "model": manifest["model"],
            "model_fingerprint": manifest["model_fingerprint"], "target": manifest["target"],
            "device": {"name": "synthetic"}, "repeats": 9, "kernels": kernels,
            "copies": [{**{k: v for k, v in c.items() if k != "binding"},
                        **timed(seconds(None, (c["source"], c["target"], tuple(c["shape"]))))}
                       for c in manifest["copies"]]}


def test_tuning_set_lists_every_storage_of_every_kernel(two_convs_set):
    manifest = tuning.read_set(two_convs_set)
    convs = [k for k in manifest["kernels"].values() if k["name"].startswith("conv2d")]
    # Both convs are one kernel (their weights are constants): its data in,
    # its weights and its output each in a buffer or a texture, eight
    # variants, built once.
    assert len(convs) == 1 and convs[0]["positions"] == ["in0", "w1", "out0"]
    conv_key = next(k for k, v in manifest["kernels"].items() if v is convs[0])
    scopes = sorted(tuple(v["scopes"]) for v in manifest["variants"] if v["kernel"] == conv_key)
    assert scopes == sorted(itertools.product(["global", "global.texture-weight"], repeat=3))
    assert len({(v["kernel"], tuple(v["scopes"])) for v in manifest["variants"]}) == \
        len(manifest["variants"])
    assert {(c["source"], c["target"]) for c in manifest["copies"]} == \
        {("global", "global.texture-weight"), ("global.texture-weight", "global")}
    bindings = [v["binding"] for v in manifest["variants"]] + \
        [c["binding"] for c in manifest["copies"]]
    plan = json.loads((two_convs_set / tuning.PROGRAM / "plan.json").read_text())
    assert {s["binding"] for s in plan["steps"]} == set(bindings)


def test_timed_tuning_file_round_trips(two_convs_set, tmp_path):
    pytest.importorskip("pyopencl")
    from texscope.opencl.source import default_device

    document = measure(two_convs_set, default_device(), repeats=1, progress_stream=open(os.devnull, "w"))
    path = tmp_path / "tuning.json"
    path.write_text(json.dumps(document))
    loaded = tuning.load(path)
    manifest = tuning.read_set(two_convs_set)
    assert loaded["model_fingerprint"] == manifest["model_fingerprint"]
    assert sum(len(k["variants"]) for k in loaded["kernels"].values()) == len(manifest["variants"])
    assert all(v["seconds"] > 0 for k in loaded["kernels"].values() for v in k["variants"])
    # With one run, the fastest and slowest are the median: a zero spread.
    assert all(v["min_seconds"] == v["seconds"] == v["max_seconds"]
               for k in loaded["kernels"].values() for v in k["variants"])
    assert all(c["min_seconds"] == c["seconds"] == c["max_seconds"] for c in loaded["copies"])
    assert len(loaded["copies"]) == len(manifest["copies"])
    assert all(c["seconds"] > 0 for c in loaded["copies"])
    assert 0 < loaded["set_up_s"] <= loaded["timed_s"]
    # A variant is priced by the runs with its maps touched just before it
    # (chained); copies by the runs as they are (cold).
    for kernel in loaded["kernels"].values():
        for v in kernel["variants"]:
            assert v["seconds"] == v["chained_seconds"]
            assert all(v[f"{state}_seconds"] > 0 for state in ("cold", "chained"))
            assert "warm_seconds" not in v
    assert all(c["seconds"] == c["cold_seconds"] for c in loaded["copies"])
    # The model's own all-buffer and all-texture programs, run whole.
    assert loaded["in_place"]["function"] == "main"
    for label in tuning.IN_PLACE_LABELS:
        timed = loaded["in_place"][label]
        assert 0 < timed["min_seconds"] <= timed["seconds"] <= timed["max_seconds"]
    result = build(two_convs(), TARGET, tuning=path)
    assert len(result.report.kernels) == 4 and result.report.untuned == ()
    conv = next(k for k in result.report.kernels if k.call == "lv1")
    assert len(conv.alternatives) == 7 and conv.chosen not in conv.alternatives


def test_a_malformed_tuning_file_is_refused(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"format": tuning.FORMAT, "version": 1, "model": "m",
                                "model_fingerprint": "0", "target": TARGET,
                                "device": {"name": "d"}, "copies": [],
                                "kernels": {"k": {"positions": ["in0"],
                                                  "variants": [{"scopes": [], "seconds": 1}]}}}))
    with pytest.raises(TexscopeError, match="one scope per position"):
        tuning.load(path)
    document = json.loads(path.read_text())
    document["kernels"]["k"]["variants"] = [{"scopes": ["global"], "seconds": 2,
                                             "min_seconds": 1, "max_seconds": 1.5}]
    path.write_text(json.dumps(document))
    with pytest.raises(TexscopeError, match="min_seconds 1.0 <= seconds 2.0 <= max_seconds"):
        tuning.load(path)


def test_textures_losing_everywhere_give_an_all_buffer_plan(two_convs_set):
    manifest = tuning.read_set(two_convs_set)

    def seconds(kernel, scopes):
        return 1e-3 + sum(is_texture_scope(s) for s in scopes[:2] if isinstance(s, str)) * 1e-3

    result = build(two_convs(), TARGET, tuning=synthetic(manifest, seconds))
    assert result.report.summary()["in_texture"] == 0
    assert all("texture" not in k.chosen for k in result.report.kernels)
    (verdict,) = result.report.verdicts
    assert verdict.kept == "tuned" and verdict.margin_s == 0.0
    assert verdict.reason.startswith("tuned plan predicted 4.000 ms, all-buffer 4.000 ms: the "
                                     "optimum is the all-buffer plan itself, tuned plan kept")


def test_textures_winning_everywhere_give_the_all_texture_plan(two_convs_set):
    manifest = tuning.read_set(two_convs_set)

    def seconds(kernel, scopes):
        if kernel is None:
            return 1.0  # copies dear
        return 1e-2 - sum(is_texture_scope(s) for s in scopes) * 1e-3

    tuned = build(two_convs(), TARGET, tuning=synthetic(manifest, seconds)).report
    texture = texture_target(TARGET)
    everywhere = build(two_convs(), TARGET, profile=plan_profiles(texture)["all-texture"]).report
    assert tuned.summary()["in_texture"] == everywhere.summary()["in_texture"] > 0
    assert {t.name: t.scope for t in tuned.tensors} == {t.name: t.scope for t in everywhere.tensors}


def test_the_tuning_set_covers_maps_in_textures_with_weights_in_buffers():
    texture = texture_target(TARGET)
    report = build(CONV_OF_CONSTANT_WEIGHTS, TARGET,
                   profile=plan_profiles(texture)["maps-in-textures"]).report
    scopes = {t.name: t.scope for t in report.tensors}
    assert [scope for name, scope in scopes.items() if name.startswith("const")] == ["global"]
    assert scopes["x_layout_transform"] == "global.texture-weight"


def test_a_tuning_file_of_another_model_or_target_is_refused(two_convs_set):
    manifest = tuning.read_set(two_convs_set)
    document = synthetic(manifest, lambda *_: 1e-3)
    with pytest.raises(TexscopeError, match="another model"):
        build(conv_then_pool(), TARGET, tuning=document)
    with pytest.raises(TexscopeError, match="measured for target"):
        build(two_convs(), "mali-opencl", tuning=document)


def test_a_tuning_file_for_smaller_images_applies(two_convs_set):
    # A build fitted to a device whose images are smaller than the preset's
    # (texscope run, build --fit-device) builds the same kernels.
    manifest = tuning.read_set(two_convs_set)
    document = synthetic(manifest, lambda *_: 1e-3)
    smaller = dict(json.loads(document["target"]), texture_spatial_limit=4096,
                   texture_depth_limit=256)
    report = build(two_convs(), smaller, tuning=document).report
    assert report.kernels and report.untuned == () and report.verdicts


# The oracle: every assignment of storages realized in the module (stages 4
# and 5), fused as the build fuses, and priced from the fused module alone:
# each kernel call by the synthetic time of its kernel (by kernel_key) with
# its operands' scopes, each copy by its time.  It shares none of the tuned
# planner's code; assignments whose kernels the tuning never measured (a
# copy splitting a fused kernel) are outside what either may choose.


def _device_target():
    texture = texture_target(TARGET)
    return texture, tvm.target.Target(texture.target, host=host_target(None, texture.target))


def _fused(annotated):
    _, device = _device_target()
    with device:
        return run_under(device, [tvm.tirx.transform.BindTarget(device), *fuse_passes()],
                         "test.fuse")(annotated)


def _fused_price(fused, table, copies) -> float | None:
    total = 0.0
    for binding in (b for block in fused["main"].body.blocks for b in block.bindings):
        call = binding.value
        if not (isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op)):
            continue
        if call.op.name == TO_VDEVICE:
            source = call.args[0].ty.vdevice.memory_scope if call.args[0].ty.vdevice else "global"
            total += copies[(str(source), str(binding.var.ty.vdevice.memory_scope),
                             static_shape(binding.var.ty))]
        elif call.op.name == CALL_TIR:
            scopes = [str(a.ty.vdevice.memory_scope) if a.ty.vdevice else "global"
                      for a in call.args[1].fields if isinstance(a.ty, relax.TensorType)]
            scopes.append(str(binding.var.ty.vdevice.memory_scope)
                          if binding.var.ty.vdevice else "global")
            key = (kernel_key(fused[call.args[0]]), tuple(scopes))
            if key not in table:
                return None
            total += table[key]
    return total


_REALIZED = {}


def _realized(model):
    """Every valid assignment of storages of ``model()`` realized and fused
    (computed once per model)."""
    if model in _REALIZED:
        return _REALIZED[model]
    texture, device = _device_target()
    with device:
        legalized = LegalizeKeepingAttrs()(ConvertKeepingNames(device)(model()))
        consumers = collect_consumer(legalized, "main", texture_target(device))
    plans = every_plan(consumers, max_free=8)
    assert plans is not None
    found = []
    for plan in plans:
        with device:
            annotated = Cleanup()(define_vdevice(legalized, {"main": plan}, texture_target(device)))
        if not check_invariants(annotated, device):
            found.append(_fused(annotated))
    _REALIZED[model] = found
    return found


@pytest.mark.parametrize("model", [one_conv, conv_then_pool])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_tuned_plan_is_what_exhaustive_search_finds(model, seed, tmp_path, monkeypatch):
    # The optimum itself: no margin for a set's prices against the model's
    # (these are the model's), so the guard keeps it unless an extreme is it.
    monkeypatch.setattr(tuned_planner, "SET_TO_MODEL", attrs.evolve(SET_TO_MODEL, value=0.0))
    mod = model()
    tuning_set.export(mod, TARGET, tmp_path / "set", model.__name__, log=lambda *_: None)
    manifest = tuning.read_set(tmp_path / "set")
    rng = np.random.default_rng(seed)
    drawn = {}

    def seconds(kernel, scopes):
        drawn[(kernel, tuple(scopes))] = float(rng.uniform(1e-4, 1e-3))
        return drawn[(kernel, tuple(scopes))]

    document = synthetic(manifest, seconds)
    table = {k: v for k, v in drawn.items() if k[0] is not None}
    copies = {(s[0], s[1], tuple(s[2])): v for (k, s), v in drawn.items() if k is None}
    texture, device = _device_target()
    measured = measured_costs(mod, device, texture, document)
    with device:
        annotated, plans = annotate_module(ConvertKeepingNames(device)(mod),
                                           attrs.evolve(texture_target(device), tuning=measured))
    assert plans["main"].tuned.uncovered == ()
    chosen = _fused_price(_fused(annotated), table, copies)
    prices = [p for p in (_fused_price(f, table, copies) for f in _realized(model))
              if p is not None]
    assert len(prices) > 8
    assert chosen == pytest.approx(min(prices), rel=1e-9)
    assert plans["main"].tuned.predicted_s == pytest.approx(chosen, rel=1e-6)


MODEL_FILE = PRINTED_HEADER + """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((1, C, 8, 8), "float32"), w: R.Tensor((C, C, 1, 1), "float32")):
        with R.dataflow():
            c = R.nn.conv2d(x, w)
            p = R.nn.max_pool2d(c, pool_size=[3, 3], padding=[1, 1, 1, 1])
            R.output(p)
        return p
"""


def test_tune_time_build_and_replay_as_installed_commands(tmp_path):
    pytest.importorskip("pyopencl")
    model = tmp_path / "model.py"
    model.write_text(MODEL_FILE.replace("C", "8"))
    env = {**os.environ}
    run = lambda *a: subprocess.run(a, capture_output=True, text=True, env=env)  # noqa: E731
    made = run("texscope", "tune", str(model), "-o", str(tmp_path / "set"))
    assert made.returncode == 0, made.stderr
    timed = run(sys.executable, "-m", "texscope.opencl.tune", str(tmp_path / "set"),
                "-o", str(tmp_path / "tuning.json"), "--repeats", "1")
    assert timed.returncode == 0, timed.stderr
    assert "timed" in timed.stdout and (tmp_path / "tuning.json").is_file()
    built = run("texscope", "build", str(model), "--tuning", str(tmp_path / "tuning.json"),
                "-o", str(tmp_path / "out"))
    assert built.returncode == 0, built.stderr
    assert "0 calls by the cost profile" in built.stdout
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["kernels"] and report["untuned"] == []
    # The default plan (the conv's output in a texture, the pool's in a
    # buffer) is neither extreme's program: the tuner ran it whole too, and
    # the build weighs it at that time.
    first = tuning.load(tmp_path / "tuning.json")
    assert set(first["in_place"]) == {"function", "default_profile", "all-buffer", "all-texture",
                                      "default"}
    (verdict,) = report["tuned_plans"]
    assert verdict["extremes"]["default"] == first["in_place"]["default"]["seconds"]
    replayed = run(sys.executable, "-m", "texscope.opencl.replay", str(tmp_path / "out"))
    assert replayed.returncode == 0, replayed.stderr
    explained = run("texscope", "explain", str(model), "--tuning", str(tmp_path / "tuning.json"))
    assert explained.returncode == 0 and "Kernels, measured" in explained.stdout
    assert "or a plan run whole, the default or an earlier round's" in explained.stdout
    assert re.search(r"- main: tuned plan predicted .*; default \d+\.\d{3} ms", explained.stdout)
    # Fitted to the device's images, the build may plan under smaller limits
    # (test_a_tuning_file_for_smaller_images_applies): the file applies.
    fitted = run("texscope", "build", str(model), "--tuning", str(tmp_path / "tuning.json"),
                 "--fit-device", "-o", str(tmp_path / "fitted"))
    assert fitted.returncode == 0, fitted.stderr
    assert "0 calls by the cost profile" in fitted.stdout
    ran = run("texscope", "run", str(model), "--tuning", str(tmp_path / "tuning.json"))
    assert ran.returncode == 0, ran.stderr
    assert "0 calls by the cost profile" in ran.stdout
    assert re.search(r"against the CPU \(llvm\): .* -> OK", ran.stdout)

    # Measured on another device: `texscope run` knows its device and refuses.
    elsewhere = json.loads((tmp_path / "tuning.json").read_text())
    elsewhere["device"]["name"] = "Some Other GPU"
    (tmp_path / "elsewhere.json").write_text(json.dumps(elsewhere))
    refused = run("texscope", "run", str(model), "--tuning", str(tmp_path / "elsewhere.json"))
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "measured on 'Some Other GPU'" in refused.stderr and "tune on the device" in refused.stderr

    # Another model's tuning file: one line, status 2, nothing written.
    other = tmp_path / "other.py"
    other.write_text(MODEL_FILE.replace("C", "4"))
    refused = run("texscope", "build", str(other), "--tuning", str(tmp_path / "tuning.json"),
                  "-o", str(tmp_path / "refused"))
    assert refused.returncode == 2
    assert len(refused.stderr.strip().splitlines()) == 1 and "another model" in refused.stderr
    assert not (tmp_path / "refused").exists()
    not_tuning = run("texscope", "build", str(model), "--tuning", str(model),
                     "-o", str(tmp_path / "refused"))
    assert not_tuning.returncode == 2 and len(not_tuning.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "refused").exists()

    # A second round: the set made with the first file runs the plan that
    # file chose whole; the build weighs it at that time.
    again = run("texscope", "tune", str(model), "--tuning", str(tmp_path / "tuning.json"),
                "-o", str(tmp_path / "set2"))
    assert again.returncode == 0, again.stderr
    timed = run(sys.executable, "-m", "texscope.opencl.tune", str(tmp_path / "set2"),
                "-o", str(tmp_path / "tuning2.json"), "--repeats", "3")
    assert timed.returncode == 0, timed.stderr
    second = tuning.load(tmp_path / "tuning2.json")
    assert set(second["in_place"]) == {"function", "default_profile", "all-buffer",
                                       "all-texture", "default", "previous"}
    assert second["previous_tuning"] == json.loads((tmp_path / "tuning.json").read_text())
    built = run("texscope", "build", str(model), "--tuning", str(tmp_path / "tuning2.json"),
                "-o", str(tmp_path / "out2"))
    assert built.returncode == 0, built.stderr
    (verdict,) = json.loads((tmp_path / "out2" / "report.json").read_text())["tuned_plans"]
    assert verdict["extremes"]["previous"] == second["in_place"]["previous"]["seconds"]
    # Another model's file as the earlier one: one line, status 2, nothing written.
    refused = run("texscope", "tune", str(other), "--tuning", str(tmp_path / "tuning.json"),
                  "-o", str(tmp_path / "refused"))
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "another model" in refused.stderr and not (tmp_path / "refused").exists()


# The guard: the measured optimum is kept only where it beats the better of
# the all-buffer and all-texture plans (as the build makes them) by more than
# the margin; otherwise that plan, exactly.


def _weights_in_textures(manifest, gain):
    """Every texture costs a kernel 1 ms more, but the conv's weights, which
    save it ``gain`` s; copies cost a second: the optimum is the all-buffer
    plan with the weights in textures, ``2 * gain`` faster."""
    def seconds(kernel, scopes):
        if kernel is None:
            return 1.0
        entry = manifest["kernels"][kernel]
        extra = [-gain if entry["name"].startswith("conv2d") and position == "w1" else 1e-3
                 for position, scope in zip(entry["positions"], scopes) if is_texture_scope(scope)]
        return 1e-3 + sum(extra)
    return seconds


def _scopes(report):
    return {t.name: t.scope for t in report.tensors}


# Each margin adds 10% of the tuned plan's two differing conv variants
# (2 * (1 ms - gain): about 5% of the plan) for how far a set's prices may
# stand from the model's.
@pytest.mark.parametrize("gain, spread, kept, margin", [
    (1e-5, None, "all-buffer", "default 3%"),   # 0.5% faster: inside the default 3% (and 5%)
    (2e-4, None, "tuned", "default 3%"),        # 10% faster: outside 3% and 4%
    # Beyond and inside the margin of the four variants that differ (two convs
    # each way, 1% spreads as independent errors: about 0.5% of the plan).
    (1.5e-4, 0.01, "tuned", "spread over 9 runs"),  # 7.5% faster
    (5e-5, 0.01, "all-buffer", "plus 10% of the"),  # 2.5% faster: outside the noise only
    (5e-6, 0.01, "all-buffer", "spread over 9 runs"),  # 0.25% faster
])
def test_an_optimum_within_the_noise_margin_gives_the_all_buffer_plan(
        two_convs_set, gain, spread, kept, margin):
    manifest = tuning.read_set(two_convs_set)
    document = synthetic(manifest, _weights_in_textures(manifest, gain), spread)
    tuned = build(two_convs(), TARGET, tuning=document).report
    texture = texture_target(TARGET)
    buffers = build(two_convs(), TARGET, profile=plan_profiles(texture)["all-buffer"]).report
    (verdict,) = tuned.verdicts
    assert verdict.kept == kept and margin in verdict.margin_source
    assert verdict.tuned_s == pytest.approx(4e-3 - 2 * gain, rel=1e-9)
    assert verdict.extremes["all-buffer"] == pytest.approx(4e-3, rel=1e-9)
    set_to_model = 0.1 * 2 * (1e-3 - gain)
    if spread is None:
        assert verdict.margin_s == pytest.approx(0.03 * 4e-3 + set_to_model, rel=1e-9)
    else:  # the tuned plan's two conv variants (1e-3 - gain each) at their slowest and
        # all-buffer's two (1e-3 each) at their fastest, as independent errors
        assert verdict.margin_s == pytest.approx(
            (2 * (spread * (1e-3 - gain)) ** 2 + 2 * (spread * 1e-3) ** 2) ** 0.5 + set_to_model,
            rel=1e-9)
    assert f"plus 10% of the {2 * (1e-3 - gain) * 1e3:.3f} ms of the tuned plan's kernels" \
        in verdict.margin_source
    if kept == "all-buffer":
        assert _scopes(tuned) == _scopes(buffers) and tuned.copies == buffers.copies
        assert verdict.reason.startswith(
            f"tuned plan predicted {(4e-3 - 2 * gain) * 1e3:.3f} ms, all-buffer 4.000 ms: "
            "within the margin")
        assert "all-buffer kept" in verdict.reason
    else:
        assert {n for n, s in _scopes(tuned).items() if is_texture_scope(s)} == {"const0", "const1"}
        assert "faster by more than the margin" in verdict.reason
        assert "tuned plan kept" in verdict.reason


def test_a_spread_of_too_few_runs_gives_the_default_margin(two_convs_set):
    manifest = tuning.read_set(two_convs_set)
    document = synthetic(manifest, _weights_in_textures(manifest, 5e-5), spread=0.0)
    (verdict,) = build(two_convs(), TARGET, tuning={**document, "repeats": 1}).report.verdicts
    assert verdict.kept == "all-buffer"  # 2.5% faster
    assert "measured 1 run(s), too few for a spread (at least 3)" in verdict.margin_source
    assert verdict.margin_s == pytest.approx(0.03 * 4e-3 + 0.1 * 2 * (1e-3 - 5e-5), rel=1e-9)


def test_an_optimum_within_the_noise_margin_gives_the_all_texture_plan(two_convs_set):
    manifest = tuning.read_set(two_convs_set)

    def seconds(kernel, scopes):
        # Each texture saves a kernel 1 ms; the conv's weights save it
        # 1.01 ms in a buffer: the optimum is all-texture but the weights,
        # 0.02 ms (0.06%) faster.
        if kernel is None:
            return 1.0
        entry = manifest["kernels"][kernel]
        saved = [1e-3 for scope in scopes if is_texture_scope(scope)]
        if entry["name"].startswith("conv2d") and not is_texture_scope(scopes[1]):
            saved.append(1.01e-3)
        return 1e-2 - sum(saved)

    document = synthetic(manifest, seconds, spread=None)
    tuned = build(two_convs(), TARGET, tuning=document).report
    texture = texture_target(TARGET)
    textures = build(two_convs(), TARGET, profile=plan_profiles(texture)["all-texture"]).report
    (verdict,) = tuned.verdicts
    assert verdict.kept == "all-texture", verdict.reason
    assert verdict.extremes["all-texture"] - verdict.tuned_s == pytest.approx(2e-5, rel=1e-6)
    assert verdict.extremes["all-texture"] < verdict.extremes["all-buffer"]
    assert _scopes(tuned) == _scopes(textures) and tuned.copies == textures.copies
    assert "within the margin" in verdict.reason and "all-texture kept" in verdict.reason


def test_all_texture_within_its_margin_of_all_buffer_is_not_the_reference(two_convs_set):
    """Every texture saves a kernel 1 us of its 1 ms: the optimum is the
    all-texture plan, predicted a little under all-buffer; within its margin
    it is not the plan to beat, all-buffer is, and all-buffer is kept."""
    manifest = tuning.read_set(two_convs_set)

    def seconds(kernel, scopes):
        if kernel is None:
            return 1.0
        return 1e-3 - 1e-6 * sum(is_texture_scope(scope) for scope in scopes)

    tuned = build(two_convs(), TARGET, tuning=synthetic(manifest, seconds, spread=None)).report
    buffers = build(two_convs(), TARGET,
                    profile=plan_profiles(texture_target(TARGET))["all-buffer"]).report
    (verdict,) = tuned.verdicts
    assert verdict.extremes["all-texture"] < verdict.extremes["all-buffer"]
    assert verdict.tuned_s == pytest.approx(verdict.extremes["all-texture"], rel=1e-9)
    assert verdict.kept == "all-buffer"
    assert verdict.reason.startswith("tuned plan predicted 3.992 ms, all-buffer 4.000 ms (all-texture "
                                     "within its margin")
    assert "all-buffer kept; all-texture 3.992 ms" in verdict.reason
    assert _scopes(tuned) == _scopes(buffers) and tuned.copies == buffers.copies


def _run_whole(document, all_buffer, all_texture, spread=0.01) -> dict:
    """``document`` with the model's all-buffer and all-texture programs
    timed whole (seconds), each within ``spread`` of its median."""
    def timed(value):
        return {"seconds": value, "min_seconds": value * (1 - spread),
                "max_seconds": value * (1 + spread)}
    return {**document, "in_place": {"function": "main", "all-buffer": timed(all_buffer),
                                     "all-texture": timed(all_texture)}}


def _tuned_plan(mod, document):
    texture, device = _device_target()
    measured = measured_costs(mod, device, texture, document)
    with device:
        _, plans = annotate_module(ConvertKeepingNames(device)(mod),
                                   attrs.evolve(texture_target(device), tuning=measured))
    return plans["main"].tuned


def test_the_set_carries_the_models_own_extremes(two_convs_set):
    """And its default plan, which keeps the second conv's output in a
    buffer: neither extreme's program."""
    manifest = tuning.read_set(two_convs_set)
    assert manifest["in_place"] == {
        "function": "main", "default_profile": texture_target(TARGET).profile.digest,
        "programs": {"all-buffer": "in-place/all-buffer", "all-texture": "in-place/all-texture",
                     "default": "in-place/default"}}
    texture = texture_target(TARGET)
    for label in (*tuning.IN_PLACE_LABELS, tuning.DEFAULT):
        written = json.loads((two_convs_set / "in-place" / label / "plan.json").read_text())
        how = {} if label == tuning.DEFAULT else {"profile": plan_profiles(texture)[label]}
        built = build(two_convs(), TARGET, **how)
        assert written["steps"] == json.loads(json.dumps(plan_of(built).to_json()["steps"]))
    scopes = {label: {t["scope"] for t in json.loads(
        (two_convs_set / "in-place" / label / "plan.json").read_text())["tensors"]}
        for label in tuning.IN_PLACE_LABELS}
    assert not any(map(is_texture_scope, scopes["all-buffer"]))
    assert any(map(is_texture_scope, scopes["all-texture"]))


def test_prices_are_scaled_to_the_models_own_runs(two_convs_set):
    """The set says weights in textures save each conv 20%; run whole, the
    model's buffer kernels take half their set prices and its texture
    kernels 1.5 times theirs: scaled, the optimum is the all-buffer plan,
    and both extremes cost exactly what they measured."""
    manifest = tuning.read_set(two_convs_set)
    document = synthetic(manifest, _weights_in_textures(manifest, 2e-4), spread=0.01)
    (unscaled,) = build(two_convs(), TARGET, tuning=document).report.verdicts
    assert unscaled.kept == "tuned" and unscaled.tuned_s == pytest.approx(3.6e-3, rel=1e-9)
    raw_texture = unscaled.extremes["all-texture"]
    whole = _run_whole(document, 0.5 * 4e-3, 1.5 * raw_texture)
    report = build(two_convs(), TARGET, tuning=whole).report
    (verdict,) = report.verdicts
    assert verdict.extremes["all-buffer"] == pytest.approx(2e-3, rel=1e-9)
    assert verdict.extremes["all-texture"] == pytest.approx(1.5 * raw_texture, rel=1e-9)
    assert verdict.tuned_s == pytest.approx(2e-3, rel=1e-9)
    assert not any(is_texture_scope(s) for s in _scopes(report).values())
    assert verdict.reason.startswith(
        "tuned plan predicted 2.000 ms, all-buffer 2.000 ms: the optimum is the all-buffer plan "
        "itself; prices scaled to the model's own programs run whole (all-buffer 2.000 ms, "
        f"all-texture {1.5 * raw_texture * 1e3:.3f} ms): buffer kernels x0.500, kernels with a "
        "texture operand and copies x1.500, tuned plan kept")
    scale = _tuned_plan(two_convs(), whole).scale
    assert (scale.applies, scale.buffer, scale.texture) == (True, pytest.approx(0.5),
                                                            pytest.approx(1.5))
    # Each conv reads its weights from a texture: 0.8 ms at 1.5 = 1.2 ms, its
    # buffer variant 1 ms at 0.5 = 0.5 ms.
    conv = next(k for k in report.kernels if k.call == "lv1")
    assert conv.seconds == pytest.approx(0.5e-3, rel=1e-9)
    assert dict(conv.alternatives)["in0=buffer, w1=texture, out0=buffer"] == \
        pytest.approx(1.2e-3, rel=1e-9)


def test_the_models_own_runs_replace_the_set_to_model_margin(two_convs_set):
    """2.5% faster by the set: within 10% of the differing kernels, outside
    the noise.  Where the file runs the model whole (prices as measured),
    the margin is the noise: the set's spreads and all-buffer's own spread
    run whole, as independent errors; the optimum is kept."""
    manifest = tuning.read_set(two_convs_set)
    document = synthetic(manifest, _weights_in_textures(manifest, 5e-5), spread=0.01)
    (before,) = build(two_convs(), TARGET, tuning=document).report.verdicts
    assert before.kept == "all-buffer" and "plus 10% of the" in before.margin_source
    whole = _run_whole(document, 4e-3, before.extremes["all-texture"], spread=0.02)
    (verdict,) = build(two_convs(), TARGET, tuning=whole).report.verdicts
    assert verdict.kept == "tuned"
    assert verdict.tuned_s == pytest.approx(4e-3 - 1e-4, rel=1e-9)
    noise = 2 * (0.01 * (1e-3 - 5e-5)) ** 2 + 2 * (0.01 * 1e-3) ** 2
    assert verdict.margin_s == pytest.approx((noise + (0.02 * 4e-3) ** 2) ** 0.5, rel=1e-6)
    assert "plus 10%" not in verdict.margin_source
    assert "and all-buffer's own spread run whole, 0.080 ms, likewise; prices scaled to the " \
        "model's own programs run whole" in verdict.margin_source
    assert "buffer kernels x1.000, kernels with a texture operand and copies x1.000" \
        in verdict.margin_source


def test_runs_whole_of_another_function_scale_nothing(two_convs_set):
    manifest = tuning.read_set(two_convs_set)
    document = synthetic(manifest, _weights_in_textures(manifest, 5e-5), spread=0.01)
    whole = _run_whole(document, 1e-3, 1e-3)
    whole["in_place"]["function"] = "other"
    (verdict,) = build(two_convs(), TARGET, tuning=whole).report.verdicts
    assert verdict.kept == "all-buffer" and "plus 10% of the" in verdict.margin_source
    assert verdict.extremes["all-buffer"] == pytest.approx(4e-3, rel=1e-9)
    assert _tuned_plan(two_convs(), whole).scale.note == \
        "the tuning file runs none of the model's programs whole"


def _whole(all_buffer, all_texture):
    return {"function": "main",
            **{label: {"seconds": t, "min_seconds": t, "max_seconds": t}
               for label, t in (("all-buffer", all_buffer), ("all-texture", all_texture))}}


def test_the_scale_solves_one_equation_per_extreme():
    """Columns: two buffer-only kernels (1 and 2 ms) and a texture kernel
    (3 ms); all-buffer runs the first two, all-texture the first and the
    third.  Measured 6 and 11 ms: 3 * f_b = 6, f_b + 3 * f_t = 11."""
    cost = [1e-3, 2e-3, 3e-3]
    mask = np.array([False, False, True])
    priced = {"all-buffer": np.array([1, 1, 0]), "all-texture": np.array([1, 0, 1])}
    scale = tuned_planner.in_place_scale(_whole(6e-3, 11e-3), cost, mask, priced, ())
    assert scale.applies and scale.buffer == pytest.approx(2.0) and scale.texture == pytest.approx(3.0)
    assert scale.describe() == ("prices scaled to the model's own programs run whole (all-buffer "
                                "6.000 ms, all-texture 11.000 ms): buffer kernels x2.000, kernels "
                                "with a texture operand and copies x3.000")


def test_extremes_without_a_texture_share_one_factor():
    """Nothing may be a texture: both extremes run the same buffer kernels,
    the two equations are one, and one factor (their summed times over their
    summed prices) scales both classes."""
    cost = [1e-3, 2e-3]
    mask = np.array([False, False])
    same = np.array([1, 1])
    scale = tuned_planner.in_place_scale(_whole(6e-3, 6.6e-3), cost, mask,
                                         {"all-buffer": same, "all-texture": same}, ())
    assert scale.applies and scale.buffer == scale.texture == pytest.approx(12.6 / 6)


@pytest.mark.parametrize("whole, priced, uncovered, note", [
    (None, {}, (), "the tuning file runs none of the model's programs whole"),
    (_whole(6e-3, 11e-3), {}, ("lv3",), "not scaled to the model's own runs: 1 calls priced by "
                                        "the cost profile"),
    (_whole(6e-3, 11e-3), {"all-buffer": np.array([1, 1, 0]), "all-texture": None}, (),
     "not scaled to the model's own runs: an extreme the tuning cannot price"),
    # All-texture measured faster than its buffer part alone: f_texture < 0.
    (_whole(6e-3, 1e-3), {"all-buffer": np.array([1, 1, 0]), "all-texture": np.array([1, 0, 1])},
     (), "not scaled to the model's own runs: factors 2.000 (buffers), -0.333 (textures) are "
         "no scale"),
])
def test_what_cannot_be_scaled_is_left_as_measured(whole, priced, uncovered, note):
    scale = tuned_planner.in_place_scale(whole, [1e-3, 2e-3, 3e-3], np.array([False, False, True]),
                                         priced, uncovered)
    assert not scale.applies and (scale.buffer, scale.texture) == (1.0, 1.0)
    assert scale.note == note and scale.describe() == note


@pytest.fixture(scope="module")
def second_round(tmp_path_factory, two_convs_set):
    """A set made with an earlier tuning file whose plan puts both convs'
    weights in textures (each conv 20% faster there): that plan built and
    run whole beside the extremes."""
    earlier = synthetic(tuning.read_set(two_convs_set),
                        _weights_in_textures(tuning.read_set(two_convs_set), 2e-4), spread=0.01)
    root = tmp_path_factory.mktemp("second") / "set"
    tuning_set.export(two_convs(), TARGET, root, "two_convs", log=lambda *_: None,
                      previous={**earlier, "origin": "earlier.json"})
    return root, earlier


def test_a_second_round_runs_the_earlier_plan_whole(second_round):
    root, earlier = second_round
    manifest = tuning.read_set(root)
    assert manifest["in_place"]["programs"] == {
        "all-buffer": "in-place/all-buffer", "all-texture": "in-place/all-texture",
        "default": "in-place/default", "previous": "in-place/previous"}
    assert manifest["previous_tuning"] == earlier
    written = json.loads((root / "in-place" / "previous" / "plan.json").read_text())
    built = build(two_convs(), TARGET, tuning=earlier)
    assert written["steps"] == json.loads(json.dumps(plan_of(built).to_json()["steps"]))
    # The program names a weight by the call reading it; the report by the constant.
    textures = {t["name"] for t in written["tensors"] if is_texture_scope(t["scope"])}
    assert textures == {"lv.const0", "lv1.const1"}
    assert {n for n, s in _scopes(built.report).items() if is_texture_scope(s)} == \
        {"const0", "const1"}


def _second(root, earlier, previous_s, prices, texture_s=8e-3):
    """The second round's tuning file: ``prices`` per variant, the
    extremes run whole at what the prices say (all-buffer 4 ms), the
    earlier plan at ``previous_s``."""
    document = synthetic(tuning.read_set(root), prices, spread=0.01)
    whole = _run_whole(document, 4e-3, texture_s, spread=0.01)
    timed = {"seconds": previous_s, "min_seconds": previous_s * 0.99,
             "max_seconds": previous_s * 1.01}
    return {**whole, "in_place": {**whole["in_place"], "previous": timed},
            "previous_tuning": earlier}


def test_the_earlier_plan_is_weighed_at_its_measured_time(second_round):
    """The same prices choose the earlier plan again: predicted 3.6 ms,
    it ran 4.5 ms whole, slower than all-buffer's 4 ms measured: all-buffer
    is kept.  Where it ran 3 ms, it is kept, at 3 ms."""
    root, earlier = second_round
    manifest = tuning.read_set(root)
    all_texture = build(two_convs(), TARGET, tuning=earlier).report.verdicts[0].extremes[
        "all-texture"]
    prices = _weights_in_textures(manifest, 2e-4)
    slow = _second(root, earlier, 4.5e-3, prices, all_texture)
    report = build(two_convs(), TARGET, tuning=slow).report
    (verdict,) = report.verdicts
    assert verdict.kept == "all-buffer" and verdict.tuned_s == pytest.approx(4.5e-3)
    assert verdict.extremes["previous"] == pytest.approx(4.5e-3)
    assert verdict.margin_s == pytest.approx(math.hypot(0.01 * 4.5e-3, 0.01 * 4e-3))
    assert verdict.margin_source.startswith(
        "the optimum is the previous plan, measured whole: its spread 0.045 ms and all-buffer's "
        "0.040 ms as independent errors")
    assert not any(is_texture_scope(s) for s in _scopes(report).values())
    fast = build(two_convs(), TARGET, tuning=_second(root, earlier, 3e-3, prices, all_texture))
    (verdict,) = fast.report.verdicts
    assert verdict.kept == "tuned" and verdict.tuned_s == pytest.approx(3e-3)
    assert verdict.reason.startswith("tuned plan predicted 3.000 ms, previous 3.000 ms: the "
                                     "optimum is the previous plan itself")
    assert {n for n, s in _scopes(fast.report).items() if is_texture_scope(s)} == \
        {"const0", "const1"}


def test_an_earlier_plan_that_ran_fastest_is_the_one_to_beat(second_round):
    """The new prices say textures lose everywhere (the optimum all-buffer,
    4 ms measured), but the earlier plan ran 3 ms whole: it is kept."""
    root, earlier = second_round
    manifest = tuning.read_set(root)

    def losing(kernel, scopes):
        if kernel is None:
            return 1.0
        return 1e-3 + 1e-3 * sum(is_texture_scope(s) for s in scopes)

    whole = _second(root, earlier, 3e-3, losing, texture_s=1e-2)
    report = build(two_convs(), TARGET, tuning=whole).report
    (verdict,) = report.verdicts
    assert verdict.kept == "previous" and verdict.tuned_s == pytest.approx(4e-3)
    assert verdict.reason.startswith("tuned plan predicted 4.000 ms, previous 3.000 ms: within "
                                     "the margin")
    assert "previous kept" in verdict.reason
    assert {n for n, s in _scopes(report).items() if is_texture_scope(s)} == {"const0", "const1"}


def _with_default(document, default_s, spread=0.01) -> dict:
    """``document`` with the default plan (of TARGET's profile) run whole at
    ``default_s``."""
    timed = {"seconds": default_s, "min_seconds": default_s * (1 - spread),
             "max_seconds": default_s * (1 + spread)}
    return {**document, "in_place": {**document["in_place"], "default": timed,
                                     "default_profile": texture_target(TARGET).profile.digest}}


def _textures_lose(kernel, scopes):
    if kernel is None:
        return 1.0
    return 1e-3 + 1e-3 * sum(is_texture_scope(s) for s in scopes)


def test_a_default_plan_that_is_an_extremes_program_is_not_built_twice(tmp_path):
    """conv_then_pool's default plan on the nvidia preset is all-buffer's
    own program: run whole once, under that label."""
    tuning_set.export(conv_then_pool(), "nvidia-opencl", tmp_path / "set", "conv_then_pool",
                      log=lambda *_: None)
    assert tuning.read_set(tmp_path / "set")["in_place"]["programs"] == {
        "all-buffer": "in-place/all-buffer", "all-texture": "in-place/all-texture"}
    assert not (tmp_path / "set" / "in-place" / "default").exists()
    untuned = plan_of(build(conv_then_pool(), "nvidia-opencl"))
    assert untuned.source == (tmp_path / "set" / "in-place" / "all-buffer" / "kernels.cl") \
        .read_text()


def test_a_default_plan_that_ran_fastest_is_the_one_to_beat(two_convs_set):
    """The prices say textures lose everywhere: the optimum is all-buffer
    (4 ms measured whole).  Where the default plan ran 3 ms whole, the
    optimum is within the margin of it and the default plan is kept, as
    the build without a tuning file makes it; where the file has no run of
    it, the default plan is not weighed."""
    manifest = tuning.read_set(two_convs_set)
    whole = _run_whole(synthetic(manifest, _textures_lose, spread=0.01), 4e-3, 1e-2)
    (plain,) = build(two_convs(), TARGET, tuning=whole).report.verdicts
    assert plain.kept == "tuned" and "default" not in plain.extremes
    assert "the optimum is the all-buffer plan itself" in plain.reason
    report = build(two_convs(), TARGET, tuning=_with_default(whole, 3e-3)).report
    (verdict,) = report.verdicts
    assert verdict.kept == "default" and verdict.extremes["default"] == pytest.approx(3e-3)
    assert verdict.reason.startswith("tuned plan predicted 4.000 ms, default 3.000 ms: within "
                                     "the margin")
    assert "default kept" in verdict.reason
    untuned = build(two_convs(), TARGET).report
    assert _scopes(report) == _scopes(untuned)
    assert {n for n, s in _scopes(report).items() if is_texture_scope(s)} == \
        {"const0", "const1", "x_layout_transform", "lv"}


def test_a_second_round_after_the_default_plan_runs_it_once(two_convs_set, tmp_path):
    """The first file kept the default plan (it ran fastest whole); the
    second round's earlier plan is that program: built and run whole once,
    as ``previous``."""
    manifest = tuning.read_set(two_convs_set)
    whole = _run_whole(synthetic(manifest, _textures_lose, spread=0.01), 4e-3, 1e-2)
    earlier = _with_default(whole, 3e-3)
    assert build(two_convs(), TARGET, tuning=earlier).report.verdicts[0].kept == "default"
    tuning_set.export(two_convs(), TARGET, tmp_path / "set", "two_convs", log=lambda *_: None,
                      previous={**earlier, "origin": "earlier.json"})
    again = tuning.read_set(tmp_path / "set")["in_place"]
    assert again == {"function": "main", "programs": {
        "all-buffer": "in-place/all-buffer", "all-texture": "in-place/all-texture",
        "previous": "in-place/previous"}}
    written = json.loads((tmp_path / "set" / "in-place" / "previous" / "plan.json").read_text())
    assert written["steps"] == json.loads(json.dumps(plan_of(build(two_convs(), TARGET))
                                                     .to_json()["steps"]))


def test_a_default_plan_of_another_cost_profile_is_not_weighed(two_convs_set):
    """The same file, built under another cost profile (every map in a
    texture, the weights in buffers): that build's default plan is not the
    one the tuner ran; the verdict says so and weighs the extremes alone."""
    manifest = tuning.read_set(two_convs_set)
    whole = _run_whole(synthetic(manifest, _textures_lose, spread=0.01), 4e-3, 1e-2)
    other = plan_profiles(texture_target(TARGET))["maps-in-textures"]
    assert other.digest != texture_target(TARGET).profile.digest
    (verdict,) = build(two_convs(), TARGET, tuning=_with_default(whole, 3e-3),
                       profile=other).report.verdicts
    assert verdict.kept == "tuned" and "default" not in verdict.extremes
    assert verdict.reason.endswith(
        "; the default plan run whole is not weighed: the tuning set's was chosen by another "
        "cost profile, tuned plan kept; all-texture 10.000 ms")


def test_a_default_plan_within_its_margin_of_all_buffer_is_not_the_reference(two_convs_set):
    """3.99 ms whole against all-buffer's 4 ms, each run 1% off its
    median: the margin (0.056 ms, both spreads as independent errors) is
    more than the gain; all-buffer stays the plan to beat."""
    manifest = tuning.read_set(two_convs_set)
    whole = _run_whole(synthetic(manifest, _textures_lose, spread=0.01), 4e-3, 1e-2)
    (verdict,) = build(two_convs(), TARGET, tuning=_with_default(whole, 3.99e-3)).report.verdicts
    assert verdict.kept == "tuned"
    assert verdict.reason.startswith(
        "tuned plan predicted 4.000 ms, all-buffer 4.000 ms (default within its margin 0.056 ms "
        "of all-buffer: not the reference): the optimum is the all-buffer plan itself")


def test_a_previous_tuning_of_another_model_is_refused_before_anything_is_written(
        two_convs_set, tmp_path):
    earlier = synthetic(tuning.read_set(two_convs_set), lambda k, s: 1e-3)
    with pytest.raises(TexscopeError, match="earlier.json was measured for another model"):
        tuning_set.export(one_conv(), TARGET, tmp_path / "set", "one_conv", log=lambda *_: None,
                          previous={**earlier, "origin": "earlier.json"})
    assert not (tmp_path / "set").exists()


def test_a_malformed_run_whole_is_refused(two_convs_set, tmp_path):
    manifest = tuning.read_set(two_convs_set)
    document = _run_whole(synthetic(manifest, lambda k, s: 1e-3), 1e-3, 1e-3)
    del document["in_place"]["all-texture"]
    path = tmp_path / "tuning.json"
    path.write_text(json.dumps(document))
    with pytest.raises(TexscopeError, match=r"\"in_place\" must name a function and time each "
                                            r"of all-buffer, all-texture"):
        tuning.load(path)
    document["in_place"]["all-texture"] = {"seconds": -1.0}
    path.write_text(json.dumps(document))
    with pytest.raises(TexscopeError, match=r"in_place.all-texture: seconds -1.0 is not a time"):
        tuning.load(path)
    document["in_place"]["all-texture"] = {"seconds": 1e-3}
    document["in_place"]["default"] = {"seconds": 1e-3}
    path.write_text(json.dumps(document))
    with pytest.raises(TexscopeError, match=r"in_place.default goes with the "
                                            r"\"default_profile\" that chose it"):
        tuning.load(path)
    document["in_place"]["default_profile"] = "0123456789abcdef"
    for default, message in (("fast", r"in_place.default: must be an object with \"seconds\""),
                             ({"seconds": 1e-3, "min_seconds": 2e-3, "max_seconds": 3e-3},
                              r"in_place.default: min_seconds 0.002 <= seconds 0.001")):
        document["in_place"]["default"] = default
        path.write_text(json.dumps(document))
        with pytest.raises(TexscopeError, match=message):
            tuning.load(path)


def test_the_guard_is_explained_by_the_installed_commands(tmp_path):
    model = tmp_path / "model.py"
    model.write_text(MODEL_FILE.replace("C", "8"))
    run = lambda *a: subprocess.run(a, capture_output=True, text=True)  # noqa: E731
    made = run("texscope", "tune", str(model), "-o", str(tmp_path / "set"))
    assert made.returncode == 0, made.stderr
    manifest = tuning.read_set(tmp_path / "set")

    def seconds(kernel, scopes):
        # Textures cost a kernel 1 ms, but the weights' layout transform
        # writes one for free and the conv reads one 5 us faster: the
        # optimum, weights in a texture, is 0.2% faster than all-buffer.
        if kernel is None:
            return 1.0
        entry = manifest["kernels"][kernel]
        extra = {("conv2d", "in1"): -5e-6, ("te_layout_transform1", "out0"): 0.0}
        return 1e-3 + sum(extra.get((entry["name"].split("_NCHWc")[0], position), 1e-3)
                          for position, scope in zip(entry["positions"], scopes)
                          if is_texture_scope(scope))
    path = tmp_path / "tuning.json"
    path.write_text(json.dumps(synthetic(manifest, seconds, spread=None)))
    expected = ("tuned plan predicted 4.995 ms, all-buffer 5.000 ms: within the margin "
                "0.349 ms (the default 3% of all-buffer's time: the tuning file records no "
                "measurement spread; plus 10% of the 1.995 ms of the tuned plan's kernels and "
                "copies that differ: how far a set's prices may stand from the model's "
                "(docs/tuning.md); the tuning file runs none of the model's programs whole), "
                "all-buffer kept")
    explained = run("texscope", "explain", str(model), "--tuning", str(path))
    assert explained.returncode == 0, explained.stderr
    assert f"- main: {expected}" in explained.stdout
    built = run("texscope", "build", str(model), "--tuning", str(path), "-o", str(tmp_path / "out"))
    assert built.returncode == 0, built.stderr
    assert f"main: {expected}" in built.stdout
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    (verdict,) = report["tuned_plans"]
    assert verdict["kept"] == "all-buffer" and verdict["reason"].startswith(expected)
    assert report["summary"]["in_texture"] == 0
    again = run("texscope", "explain", str(tmp_path / "out"))
    assert again.returncode == 0 and f"- main: {expected}" in again.stdout


def _opencl_modules(executable) -> int:
    found = []

    def walk(module):
        found.append(module.kind == "opencl")
        for sub in module.imports:
            walk(sub)
    walk(executable.mod)
    return sum(found)


def test_a_tuning_sets_kernels_are_generated_in_small_device_modules(monkeypatch, tmp_path):
    # TVM's OpenCL code generation is quadratic in a module's kernels: the
    # set's kernels go to modules of KERNELS_PER_DEVICE_MODULE each, the
    # program unchanged.
    from texscope.backend import build as build_module

    built = []

    def recording(*args, **kwargs):
        result = build_module.compile_opencl(*args, **kwargs)
        built.append(_opencl_modules(result[0]))
        return result
    monkeypatch.setattr(tuning_set, "compile_opencl", recording)
    tuning_set.export(two_convs(), TARGET, tmp_path / "one", "two_convs", log=lambda *_: None)
    monkeypatch.setattr(build_module, "KERNELS_PER_DEVICE_MODULE", 4)
    tuning_set.export(two_convs(), TARGET, tmp_path / "many", "two_convs", log=lambda *_: None)
    kernels = json.loads((tmp_path / "one" / tuning.PROGRAM / "plan.json").read_text())
    assert json.loads((tmp_path / "many" / tuning.PROGRAM / "plan.json").read_text()) == kernels
    functions = len(re.findall(r"(?m)^__kernel void \w+\([^;]*\{$",
                               (tmp_path / "one" / tuning.PROGRAM / "kernels.cl").read_text()))
    assert built == [1, -(-functions // 4)] and functions > 4

    def bodies(folder):
        source = (folder / tuning.PROGRAM / "kernels.cl").read_text()
        return sorted(re.findall(r"(?ms)^__kernel void \w+\([^;]*?\{$.*?^\}$", source))
    assert bodies(tmp_path / "many") == bodies(tmp_path / "one")


def twin_branches():
    """A conv's map read by two branches computing alike (conv, bias, relu) with
    other weights, each branch then read by a conv of its own: FuseOps
    names both branches' kernels alike, and the tuned planner must tell
    them apart by the order they come in."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8, 8, 8), "float32"))
    rng = np.random.default_rng(3)

    def const(*shape):
        return relax.const(rng.normal(0, 0.3, shape).astype("float32"))

    with bb.function("main", [x]):
        with bb.dataflow():
            stem = bb.emit(relax.op.nn.relu(bb.emit(relax.op.nn.conv2d(x, const(8, 8, 1, 1)))))
            ends = []
            for _ in range(2):
                h = bb.emit(relax.op.nn.conv2d(stem, const(8, 8, 1, 1)))
                h = bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(h, const(1, 8, 1, 1)))))
                ends.append(bb.emit(relax.op.nn.conv2d(h, const(8, 8, 3, 3), padding=1)))
            out = bb.emit_output(bb.emit(relax.op.add(*ends)))
        bb.emit_func_output(out)
    return bb.get()


def test_twin_branches_are_both_tuned(tmp_path):
    root = tmp_path / "set"
    tuning_set.export(twin_branches(), TARGET, root, "twin", log=lambda *_: None)
    manifest = tuning.read_set(root)
    document = synthetic(manifest, lambda kernel, scopes: 1e-3)
    result = build(twin_branches(), TARGET, tuning=document)
    assert result.report.untuned == ()
    assert len(result.report.kernels) >= 5  # the stem, each branch's two convs


def test_the_tuner_uploads_the_inputs_once(two_convs_set, monkeypatch):
    """The warm-up run uploads every input (the variants' weights among
    them); the timed runs read what it left, as a model its weights."""
    pytest.importorskip("pyopencl")
    from texscope.opencl.memory import DeviceMemory
    from texscope.opencl.plan import read_plan
    from texscope.opencl.source import default_device

    writes = []
    original = DeviceMemory.write
    monkeypatch.setattr(DeviceMemory, "write",
                        lambda self, spec, host: writes.append(spec.name) or original(self, spec, host))
    measure(two_convs_set, default_device(), repeats=3, progress_stream=open(os.devnull, "w"))
    # So do the model's own programs, run whole after the set: once a session.
    programs = [tuning.PROGRAM, *(f"in-place/{label}" for label in
                                  (*tuning.IN_PLACE_LABELS, tuning.DEFAULT)
                                  for _ in range(WHOLE_SESSIONS))]
    assert sorted(writes) == sorted(name for folder in programs
                                    for name in read_plan(two_convs_set / folder).inputs)


def test_the_models_programs_run_whole_taking_turns_in_fresh_sessions(monkeypatch):
    """Each round sets every program up anew and warms it up; the timed runs
    take turns; a program's spread spans the runs of both rounds (here the
    second round's sessions run twice as long)."""
    from texscope.opencl import tune as tuner

    events, made = [], []

    class Recorded:
        def __init__(self, plan, inputs, device, profile, context, jobs):
            made.append(plan)
            self.plan, self.round = plan, (len(made) - 1) // 2

        def profiled(self, inputs):
            events.append((self.plan, self.round, "warm-up" if inputs is not None else "run"))
            return RunResult((), (KernelTime("lv", "k", 1e-3 * (1 + self.round)),), 0, 0)

    monkeypatch.setattr(tuner, "Session", Recorded)
    monkeypatch.setattr(tuner, "random_inputs", lambda plan: [])
    monkeypatch.setattr(tuner, "pyopencl", lambda: types.SimpleNamespace(Context=lambda d: d))
    timed = tuner.run_whole({"a": "A", "b": "B"}, "device", 3, sessions=2)
    assert made == ["A", "B", "A", "B"]
    assert events == [
        *[(p, r, step) for r in (0, 1) for p, step in (
            ("A", "warm-up"), ("B", "warm-up"), ("A", "run"), ("B", "run"),
            ("B", "run"), ("A", "run"), ("A", "run"), ("B", "run"))]]
    assert timed == {label: {"seconds": 1.5e-3, "min_seconds": 1e-3, "max_seconds": 2e-3}
                     for label in ("a", "b")}


def test_neighbours_touch_each_map_a_kernel_uses_and_change_no_value(two_convs_set):
    """Before each kernel of the set's program, an untimed rewrite of every
    map it reads (not its weights, which the manifest names) and a read of
    every image it writes; the program's outputs are the same bits with them
    as without."""
    pytest.importorskip("pyopencl")
    from texscope.opencl.neighbours import Neighbours
    from texscope.opencl.plan import KernelStep, TensorArg, read_plan
    from texscope.opencl.replay import random_inputs
    from texscope.opencl.session import Session
    from texscope.opencl.source import default_device

    plan = read_plan(two_convs_set / tuning.PROGRAM)
    inputs = random_inputs(plan)
    manifest = tuning.read_set(two_convs_set)
    weights = {name for variant in manifest["variants"] for name in variant["weights"]}
    positions = {v["binding"]: manifest["kernels"][v["kernel"]]["positions"]
                 for v in manifest["variants"]}
    assert weights and all(len(v["weights"]) == sum(p.startswith("w")
                                                    for p in positions[v["binding"]])
                           for v in manifest["variants"])
    session = Session(plan, inputs, default_device(), profile=True)
    plain = session.profiled(inputs)
    neighbours = Neighbours(session, frozenset(weights))
    touched_args = {index: sum(isinstance(a, TensorArg) and a.tensor not in weights
                               and (plan.spec(a.tensor).is_texture or a.tensor in plan.inputs)
                               for a in step.args)
                    for index, step in enumerate(plan.steps) if isinstance(step, KernelStep)}
    assert {i: len(t) for i, t in neighbours.before.items()} == \
        {i: n for i, n in touched_args.items() if n}
    assert neighbours.launches == sum(touched_args.values()) > 0
    touched = session.profiled(inputs, before=neighbours.before)
    assert all(np.array_equal(a, b) for a, b in zip(plain.outputs, touched.outputs))


def test_a_set_naming_no_weights_is_refused_in_one_line(two_convs_set, tmp_path):
    """A set written before sets named their weights: the tuner cannot
    leave the weights alone, so it says so, exit 2, and writes nothing."""
    old = tmp_path / "old"
    shutil.copytree(two_convs_set, old)
    manifest = json.loads((old / tuning.SET_MANIFEST).read_text())
    for variant in manifest["variants"]:
        del variant["weights"]
    (old / tuning.SET_MANIFEST).write_text(json.dumps(manifest))
    done = subprocess.run([sys.executable, "-m", "texscope.opencl.tune", str(old), "-o",
                           str(tmp_path / "tuning.json")], capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == (f"tune: error: {old}: its variants name no weights (a set "
                                   "written by an older texscope): write it again with "
                                   "`texscope tune MODEL -o DIR`")
    assert not (tmp_path / "tuning.json").exists()



@pytest.mark.parametrize("breakage, message", [
    (lambda root: shutil.rmtree(root / "in-place" / "all-texture"),
     "in-place/all-texture: no plan.json"),
    (lambda root: (root / tuning.SET_MANIFEST).write_text(
        (root / tuning.SET_MANIFEST).read_text().replace('"all-buffer": "in-place/all-buffer",', "")),
     "\"in_place\" must name a function and a program folder for each of all-buffer, "
     "all-texture"),
])
def test_a_set_whose_own_programs_are_broken_is_refused_in_one_line(two_convs_set, tmp_path,
                                                                    breakage, message):
    """Checked before anything runs: one line, exit 2, nothing written."""
    broken = tmp_path / "set"
    shutil.copytree(two_convs_set, broken)
    breakage(broken)
    done = subprocess.run([sys.executable, "-m", "texscope.opencl.tune", str(broken), "-o",
                           str(tmp_path / "tuning.json")], capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.startswith("tune: error: ") and done.stderr.count("\n") == 1
    assert message in done.stderr
    assert not (tmp_path / "tuning.json").exists()


def test_a_texture_read_only_through_copies_is_priced_as_the_build_folds_it():
    """The build writes a buffer where every reader of a texture reads a
    copy to a buffer (FoldTextureCopies): the planner prices plans so."""
    from types import SimpleNamespace as Data

    from texscope.knowledge.registry import Storage
    T, B = Storage.TEXTURE, Storage.BUFFER
    read_by = lambda *calls: tuple(Data(call=c) for c in calls)  # noqa: E731
    graph = Data(tensors=[Data(index=i) for i in range(5)], producers={0: 0, 1: 1, 2: 2, 3: 3})
    consumers = Data(demands=[read_by(5, 6),   # both read a buffer: folded
                              read_by(5),      # read as a texture: kept
                              read_by(None),   # returned: kept
                              read_by(6),      # its producer writes only textures: kept
                              read_by(6)])     # a parameter: no producer, kept
    reads = [[B, B], [T], [T], [B], [B]]
    allowed = lambda t: frozenset({T}) if t.index == 3 else frozenset({T, B})  # noqa: E731
    storages, kept_reads = tuned_planner._folded(graph, consumers, ([T] * 5, reads), allowed)
    assert storages == [B, T, T, T, T] and kept_reads is reads
