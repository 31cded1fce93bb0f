"""Cost profiles: measured on PoCL by `texscope calibrate`, read by the planner."""

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tvm import relax
from tvm.script import ir as I, relax as R

import texscope
from conftest import ADRENO
from modules import rules
from modules.constant_folding import CONV_OF_CONSTANT_WEIGHTS
from texscope.opencl import calibrate
from texscope.knowledge import profile as cost_profile
from texscope.opencl import source
from texscope.cli import main
from texscope.knowledge.registry import Storage

ROOT = Path(__file__).parent.parent
RULES = str(Path(__file__).parent / "modules" / "rules.py")
TINY = dict(shapes=((8, 8),), repeats=1, copy_sizes=(1, 65536))


@pytest.fixture(scope="module")
def measured():
    """A profile measured on the default OpenCL device (PoCL here), tiny config."""
    return calibrate.calibrate(0, **TINY, progress_stream=open("/dev/null", "w"))


def priced(read: float, write: float, launch_s: float | None = None) -> cost_profile.CostProfile:
    """The Adreno defaults with every kernel class priced ``read``/``write``."""
    document = copy.deepcopy(dict(cost_profile.default("adreno").document))
    for prices in document["kernels"].values():
        prices["read_gain"] = {"value": read, "source": "test"}
        prices["write_gain"] = {"value": write, "source": "test"}
    if launch_s is not None:
        document["copy"]["seconds_per_launch"] = {"value": launch_s, "source": "test"}
    return cost_profile.from_document(document, "test")


def plan(mod, profile=None):
    texture = texscope.texture_target(ADRENO, profile)
    packed = texscope.ConvertToPackedLayout(ADRENO)(mod)
    return texscope.collect_producer(texscope.collect_consumer(packed, "main", texture))


@I.ir_module
class PoolAndMean:
    """The conv output feeds a pool (either storage) and a mean (buffers only)."""

    @R.function
    def main(x: R.Tensor((1, 8, 16, 16), "float32"), w: R.Tensor((8, 8, 3, 3), "float32")):
        with R.dataflow():
            c = R.nn.conv2d(x, w, padding=(1, 1))
            p = R.nn.max_pool2d(c, pool_size=(2, 2), strides=(2, 2))
            m = R.mean(c, axis=[2, 3])
            gv = (p, m)
            R.output(gv)
        return gv


def test_calibration_measures_every_kernel_class_with_a_source(measured):
    profile = cost_profile.from_document(measured)
    classes = {e.cost_class for e in texscope.knowledge.registry.entries() if e.cost_class}
    # A class without a microbenchmark of its own is priced as the one it
    # was split off (a 1x1 conv as any packed conv).
    assert set(profile.kernels) == {b.cost_class for b in calibrate.BENCHMARKS}
    assert classes - set(profile.kernels) == {"pointwise_conv"}
    assert profile.prices("pointwise_conv") is profile.prices("packed_conv") is not None
    assert profile.copy_seconds_per_byte.value > 0 and profile.copy_seconds_per_launch.value > 0
    assert "measured by texscope calibrate" in profile.copy_seconds_per_byte.source
    device = source.devices()[0]
    assert measured["device"]["name"] == device.name.strip()
    assert measured["device"]["driver_version"] == device.driver_version.strip()
    for name, prices in measured["kernels"].items():
        assert "measured by texscope calibrate" in prices["read_gain"]["source"], name
        (sample,) = prices["samples"]
        assert sample["buffer_s"] > 0 and sample["image_in_s"] > 0
        # The gain is what the two times say, in bytes a copy moves meanwhile.
        expected = (sample["buffer_s"] - sample["image_in_s"]) / (
            sample["bytes_read"] * profile.copy_seconds_per_byte.value)
        assert prices["read_gain"]["value"] == pytest.approx(expected)
        if name in ("packed_conv", "depthwise_conv"):  # their weights, in an image
            expected = (sample["buffer_s"] - sample["weight_image_s"]) / (
                sample["bytes_weights"] * profile.copy_seconds_per_byte.value)
            assert prices["weight_read_gain"]["value"] == pytest.approx(expected)
            assert "its weights in an image" in prices["weight_read_gain"]["source"]
        else:
            assert "weight_read_gain" not in prices


def test_texscope_calibrate_writes_a_profile_the_build_reads(tmp_path):
    out = tmp_path / "pocl.json"
    done = subprocess.run(["texscope", "calibrate", "--shapes", "8x8", "--repeats", "1",
                           "-o", str(out)], capture_output=True, text=True, check=True)
    assert "written to" in done.stdout
    assert "] 1/" in done.stderr and "copy buffer->image" in done.stderr  # the progress bar
    profile = cost_profile.load(out)
    assert profile.device["name"] == source.devices()[0].name.strip()
    # Running it again replaces its own file.
    subprocess.run(["texscope", "calibrate", "--shapes", "8x8", "--repeats", "1", "-o", str(out)],
                   capture_output=True, check=True)


def test_calibration_runs_without_tvm(tmp_path):
    """python -m texscope.opencl.calibrate imports no TVM."""
    script = f"""
import sys
sys.modules["tvm"] = None
sys.modules["tvm_ffi"] = None
sys.path.insert(0, {str(ROOT)!r})
from texscope.opencl import calibrate
sys.exit(calibrate.main(["--shapes", "8x8", "--repeats", "1", "-o", {str(tmp_path / "p.json")!r}]))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "p.json").read_text())["format"] == cost_profile.FORMAT


def test_calibrate_refuses_to_overwrite_what_it_did_not_write(tmp_path, capsys):
    other = tmp_path / "notes.json"
    other.write_text('{"mine": 1}')
    assert main(["calibrate", "--shapes", "8x8", "-o", str(other)]) == 2
    assert "not a texscope cost profile" in capsys.readouterr().err
    assert other.read_text() == '{"mine": 1}'
    assert main(["calibrate", "--device", "99", "-o", str(tmp_path / "p.json")]) == 2
    assert "no OpenCL device 99" in capsys.readouterr().err
    assert not (tmp_path / "p.json").exists()


def test_default_profiles_give_every_number_a_source():
    classes = {e.cost_class for e in texscope.knowledge.registry.entries() if e.cost_class}
    for name in ("adreno", "mali", "nvidia"):
        document = json.loads((cost_profile.DEFAULTS_DIR / f"{name}.json").read_text())
        profile = cost_profile.from_document(document)
        assert classes <= set(profile.kernels)
        if name == "nvidia":  # measured on one GPU, every price
            sources = [profile.copy_seconds_per_byte.source, *(
                price.source for prices in profile.kernels.values()
                for price in (prices.read_gain, prices.write_gain))]
            assert all(s.startswith("measured on an NVIDIA H200") for s in sources)
            continue
        assert profile.copy_launch_bytes == pytest.approx(65536)  # the price before profiles
        assert "guess" in profile.copy_seconds_per_byte.source


def test_a_profiles_digest_follows_its_numbers_not_their_sources():
    """The tuning set names the profile that chose its default plan by it."""
    adreno, nvidia = cost_profile.default("adreno"), cost_profile.default("nvidia")
    document = copy.deepcopy(adreno.document)
    for prices in document["kernels"].values():
        for price in prices.values():
            price["source"] = "written elsewhere"
    assert cost_profile.from_document(document, "elsewhere").digest == adreno.digest
    name, prices = next(iter(sorted(document["kernels"].items())))
    prices["read_gain"]["value"] += 0.125
    assert cost_profile.from_document(document).digest != adreno.digest
    assert re.fullmatch(r"[0-9a-f]{16}", adreno.digest) and adreno.digest != nvidia.digest
    # Mali's built-in guesses are Adreno's numbers: the same plans, one digest.
    assert cost_profile.default("mali").digest == adreno.digest


def test_the_nvidia_profile_keeps_1x1_and_depthwise_maps_in_buffers_and_3x3_maps_in_textures():
    # What the H200 measured: a 3x3 conv gains from reading an image, a 1x1
    # or depthwise conv loses.
    profile = cost_profile.default("nvidia")
    entries = {e.cost_class: e for e in texscope.knowledge.registry.BUILTIN if e.cost_class}
    assert profile.read_gain(entries["packed_conv"]) > 0
    assert profile.read_gain(entries["pointwise_conv"]) < 0
    assert profile.read_gain(entries["depthwise_conv"]) < 0
    assert profile.read_gain(entries["pointwise_conv"], weight=True) < 0
    assert texscope.texture_target("mali-opencl").profile.origin == "built-in mali"
    assert texscope.texture_target(ADRENO).profile.origin == "built-in adreno"


@pytest.mark.parametrize("field, value, message", [
    (("copy", "seconds_per_byte"), {"value": 1e-10}, "needs a \"source\""),
    (("copy", "seconds_per_byte"), {"value": -1.0, "source": "x"}, "must be positive"),
    (("kernels", "pool", "read_gain"), {"value": "fast", "source": "x"}, "not a finite number"),
    (("version",), 99, "profile version 99"),
])
def test_a_bad_profile_is_a_named_error(field, value, message):
    document = copy.deepcopy(dict(cost_profile.default("adreno").document))
    where = document
    for key in field[:-1]:
        where = where[key]
    where[field[-1]] = value
    with pytest.raises(texscope.TexscopeError, match=message):
        cost_profile.from_document(document, "bad.json")


def test_slow_textures_keep_tensors_in_buffers():
    default = plan(rules.MaxPool)
    assert default.of("c").storage is Storage.TEXTURE      # the pool reads a texture
    assert default.of("lv1").storage is Storage.TEXTURE    # the packed weights too
    slow = plan(rules.MaxPool, priced(read=-2.0, write=-2.0))
    assert slow.of("c").storage is Storage.BUFFER
    assert slow.of("lv1").storage is Storage.BUFFER
    # Packed convs read their data from a buffer too: slow textures keep it one.
    assert default.of("lv").storage is Storage.TEXTURE
    assert slow.of("lv").storage is Storage.BUFFER
    assert slow.of("lv").reason == ("buffer; read directly by c; the cost profile prices reading "
                                    "it from a texture below a buffer (read gain -2 per byte)")
    assert slow.copies == 0


@I.ir_module
class PackedAdd:
    """Packed parameters added: the named relax.add entry, not the generic
    injective one, describes the call."""

    @R.function
    def main(x: R.Tensor((1, 2, 8, 8, 4), "float32"), y: R.Tensor((1, 2, 8, 8, 4), "float32")):
        with R.dataflow():
            gv = R.add(x, y)
            R.output(gv)
        return gv


def test_named_elementwise_operators_take_the_profiles_elementwise_prices():
    assert plan(PackedAdd).of("x").storage is Storage.TEXTURE  # the default's +0.125
    document = copy.deepcopy(dict(cost_profile.default("adreno").document))
    document["kernels"]["elementwise"]["read_gain"] = {"value": -2.0, "source": "test"}
    slow = plan(PackedAdd, cost_profile.from_document(document, "test"))
    assert slow.of("x").storage is Storage.BUFFER and slow.of("y").storage is Storage.BUFFER


def test_free_copies_let_the_planner_copy():
    default = plan(PoolAndMean)
    assert default.copies == 0 and default.of("c").storage is Storage.BUFFER
    # Copies that cost nothing next to what textures save: the pool reads a
    # texture of c and the mean a buffer of it, one copy between them.
    cheap = plan(PoolAndMean, priced(read=1000.0, write=1000.0, launch_s=0.0))
    c = cheap.of("c")
    assert cheap.copies == 1 and c.storage is Storage.TEXTURE and c.copied_to == ("global",)


def test_plan_cost_prices_with_the_profile_it_is_given():
    mod = texscope.texture_scope_pipeline(ADRENO)(rules.MaxPool)
    default = texscope.plan_cost(mod, ADRENO)
    slow = texscope.plan_cost(mod, ADRENO, profile=priced(read=-2.0, write=-2.0))
    assert default.texture_saving > 0 and default.seconds < 0
    assert slow.texture_saving < 0 and slow.seconds > 0
    assert slow.seconds == pytest.approx(slow.units * 16 / 6e9)


def test_pipeline_and_explain_take_a_profile(tmp_path, capsys):
    slow = priced(read=-2.0, write=-2.0)
    annotated = texscope.texture_scope_pipeline(ADRENO, profile=slow)(rules.MaxPool)
    # Every texture costs under it, the conv's data included: no texture at all.
    found = texscope.plan_cost(annotated, ADRENO, profile=slow)
    assert (found.copies, found.texture_saving, found.units) == (0, 0, 0)
    assert texscope.texture_scope_pipeline(ADRENO)(rules.MaxPool).global_infos != \
        annotated.global_infos  # the default plan has textures
    path = tmp_path / "slow.json"
    path.write_text(json.dumps(slow.document))
    assert main(["explain", RULES, "--module", "MaxPool", "--tensor", "c"]) == 0
    # c's row: its scope, then the reason (a row, not a consumer label).
    assert re.search(r"^c .* global\.texture-weight +texture;", capsys.readouterr().out, re.M)
    assert main(["explain", RULES, "--module", "MaxPool", "--tensor", "c",
                 "--cost-profile", str(path)]) == 0
    assert re.search(r"^c .* global +buffer;", capsys.readouterr().out, re.M)
    (tmp_path / "bad.json").write_text("{")
    assert main(["build", RULES, "--module", "MaxPool", "--cost-profile",
                 str(tmp_path / "bad.json"), "-o", str(tmp_path / "out")]) == 2
    assert "bad.json, line 1: not JSON" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def _conv_operand_scopes(mod) -> tuple[str, str]:
    conv = next(b.value for b in mod["main"].body.blocks[0].bindings
                if isinstance(b.value, relax.Call) and b.value.op.name == "relax.nn.conv2d")
    return tuple(str(arg.ty.vdevice.memory_scope) for arg in conv.args)


def test_a_profile_may_price_weight_reads_apart_from_map_reads():
    document = copy.deepcopy(dict(cost_profile.default("adreno").document))
    document["kernels"]["packed_conv"]["weight_read_gain"] = {"value": -0.5, "source": "test"}
    profile = cost_profile.from_document(document, "test")
    conv = next(e for e in texscope.knowledge.registry.BUILTIN if e.cost_class == "packed_conv")
    pool = next(e for e in texscope.knowledge.registry.BUILTIN if e.cost_class == "pool")
    assert profile.read_gain(conv) == 1.0 and profile.read_gain(conv, weight=True) == -0.5
    # A class that gives no weight price reads weights at its map price.
    assert profile.read_gain(pool, weight=True) == profile.read_gain(pool) == 0.5
    assert "packed_conv read +1 weight read -0.5 write +0" in profile.describe()
    document["kernels"]["packed_conv"]["weight_read_gain"] = {"value": -0.5}
    with pytest.raises(texscope.TexscopeError, match="kernels.packed_conv.weight_read_gain: "
                                                     "every number needs a \"source\""):
        cost_profile.from_document(document, "bad.json")


def test_the_nvidia_profile_reads_a_1x1_convs_weights_and_map_from_buffers():
    mod = CONV_OF_CONSTANT_WEIGHTS  # a 1x1 conv
    assert _conv_operand_scopes(texscope.texture_scope_pipeline("adreno-opencl")(mod)) == (
        "global.texture-weight", "global.texture-weight")
    assert _conv_operand_scopes(texscope.texture_scope_pipeline("nvidia-opencl")(mod)) == (
        "global", "global")
    texture = texscope.texture_target("nvidia-opencl")
    packed = texscope.ConvertToPackedLayout("nvidia-opencl")(mod)
    weight = next(c for c in texscope.collect_producer(texscope.collect_consumer(
        packed, "main", texture)).choices if c.tensor.startswith("const"))
    assert weight.reason.endswith("the cost profile prices reading a weight from a texture "
                                  "below a buffer (read gain -1 per byte)")
    assert texture.profile.origin == "built-in nvidia"


def test_the_nvidia_plan_reads_a_3x3_conv_from_images_and_a_1x1_conv_from_buffers():
    from modules import rules  # pylint: disable=import-outside-toplevel

    def conv_scopes(target):
        mod = texscope.texture_scope_pipeline(target)(rules.Conflict)  # a 3x3 conv, then a 1x1
        return {b.var.name: tuple(str(a.ty.vdevice.memory_scope) for a in b.value.args)
                for b in mod["main"].body.blocks[0].bindings
                if isinstance(b.value, relax.Call) and b.value.op.name == "relax.nn.conv2d"}

    assert conv_scopes("nvidia-opencl") == {"c": ("global.texture", "global.texture-weight"),
                                            "p": ("global", "global")}
    # Adreno's guesses price both alike: its 1x1 conv reads a buffer only
    # because its map is read by reductions too (a texture would need a copy).
    assert conv_scopes("adreno-opencl") == {
        "c": ("global.texture-weight", "global.texture-weight"),
        "p": ("global", "global.texture-weight")}


def test_a_profile_with_every_map_in_a_texture_keeps_its_weight_prices():
    nvidia = cost_profile.default("nvidia")
    maps = nvidia.with_map_gains(10.0, 10.0, "every map")
    assert all((p.read_gain.value, p.write_gain.value) == (10.0, 10.0)
               for p in maps.kernels.values())
    assert maps.kernels["pointwise_conv"].weight_read_gain.value == -1.0  # as measured
    # A class without a weight price had its weights priced as its maps: still so.
    assert maps.kernels["packed_conv"].weight_read_gain == nvidia.kernels["packed_conv"].read_gain
    annotated = texscope.texture_scope_pipeline("nvidia-opencl", profile=maps)(
        CONV_OF_CONSTANT_WEIGHTS)
    assert _conv_operand_scopes(annotated) == ("global.texture", "global")


@pytest.mark.parametrize("name", ["packed_conv", "depthwise_conv"])
def test_a_convs_weights_read_from_an_image_give_what_they_give_from_a_buffer(name):
    cl = source.pyopencl()
    bench = calibrate._Bench(cl, calibrate.pick_device(0), repeats=1)
    c4, size = 2, 6
    shape = calibrate.OPERANDS[name]
    row = calibrate.weight_row(shape, c4)
    rng = np.random.default_rng(3)
    data = rng.standard_normal((c4, size, size, 4)).astype(np.float32)
    weights = rng.standard_normal((c4, row, 4)).astype(np.float32)
    mf = cl.mem_flags
    in_buffer = cl.Buffer(bench.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=data)
    weight_image = bench.image(row, c4, 1, fill=False)
    cl.enqueue_copy(bench.queue, weight_image, weights[None], origin=(0, 0, 0),
                    region=(row, c4, 1))
    outputs = []
    for variant, weight in (("buffer", cl.Buffer(bench.context, mf.READ_ONLY | mf.COPY_HOST_PTR,
                                                 hostbuf=weights)),
                            ("weight_image", weight_image)):
        out = np.empty_like(data)
        out_buffer = cl.Buffer(bench.context, mf.WRITE_ONLY, out.nbytes)
        kernel = bench.kernel(variant, name)
        kernel.set_args(in_buffer, weight, out_buffer, *(np.int32(v) for v in (c4, size, size,
                                                                                size, size)))
        cl.enqueue_nd_range_kernel(bench.queue, kernel, (size, size, c4), None)
        cl.enqueue_copy(bench.queue, out, out_buffer)
        outputs.append(out)
    assert np.abs(outputs[0]).max() > 0
    np.testing.assert_array_equal(outputs[0], outputs[1])
