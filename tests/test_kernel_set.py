"""Calibration from texscope's own built kernels: the set is built here (TVM),
timed on PoCL without TVM, and priced as the microbenchmarks are."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from texscope.backend.tuning import kernel_set as exporter
from texscope.cli import main
from texscope.knowledge import profile as cost_profile
from texscope.knowledge import registry
from texscope.models import calibration
from texscope.opencl import calibrate, kernel_set
from texscope.opencl.plan import KernelStep, TensorArg, read_plan

ROOT = Path(__file__).parent.parent


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The kernel set at one small shape, written by the command."""
    out = tmp_path_factory.mktemp("set") / "kernels"
    done = subprocess.run(["texscope", "calibrate", "--export-kernels", str(out), "--shapes",
                           "8x8", "--target", "adreno-opencl"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert f"texscope calibrate --kernels {out}" in done.stdout  # says what to do next
    assert "target adreno-opencl" in kernel_set.read_manifest(out)["created_by"]
    return out


def texture_operands(plan, prefix):
    """Per measured binding, its operands' names that are textures."""
    found = {}
    for step in plan.steps:
        if isinstance(step, KernelStep) and step.binding.startswith(prefix):
            found.setdefault(step.binding, set()).update(
                a.tensor for a in step.args
                if isinstance(a, TensorArg) and plan.spec(a.tensor).is_texture)
    return found


def test_every_priced_class_but_layer_norm_has_a_module():
    priced = {e.cost_class for e in registry.entries() if e.cost_class}
    assert priced - set(calibration.MODULES) == {"layer_norm"}  # writes only buffers


def test_each_variant_puts_the_class_operands_where_it_says(built):
    manifest = kernel_set.read_manifest(built)
    prefix = manifest["measured_prefix"]
    assert sorted(c["cost_class"] for c in manifest["cases"]) == sorted(calibration.MODULES)
    for case in manifest["cases"]:
        plans = {v: read_plan(built / folder) for v, folder in case["variants"].items()}
        name = case["name"]
        assert kernel_set.texture_bytes(plans["buffer"], prefix) == 0, name
        for variant in ("image_in", "image_out"):
            plan = plans[variant]
            textures = set().union(*texture_operands(plan, prefix).values())
            assert textures, (name, variant)
            # A measured kernel's output is a tensor named after its binding
            # (a padding kernel's output is a workspace, no tensor).
            written = {t for t in textures if t.startswith(prefix)}
            assert bool(written) == (variant == "image_out"), (name, variant, textures)
            assert kernel_set.texture_bytes(plan, prefix) == sum(
                kernel_set.tensor_bytes(plan.spec(t)) for t in textures)


def test_the_variant_profile_prices_only_its_class():
    base = cost_profile.default("adreno")
    prices = exporter.variant_profile(base, "pool", "image_in")
    assert (prices.kernels["pool"].read_gain.value, prices.kernels["pool"].write_gain.value) == \
        kernel_set.VARIANTS["image_in"]
    others = {(k.read_gain.value, k.write_gain.value) for n, k in prices.kernels.items() if n != "pool"}
    assert others == {(0.0, 0.0)}


def test_calibrate_prices_the_set_classes_from_the_built_kernels(built):
    document = calibrate.calibrate(0, shapes=((8, 8),), repeats=1, copy_sizes=(1, 65536),
                                   progress_stream=open("/dev/null", "w"), kernels_dir=built)
    profile = cost_profile.from_document(document)
    per_byte = profile.copy_seconds_per_byte.value
    for name in calibration.MODULES:
        prices = document["kernels"][name]
        assert "texscope's own built kernels" in prices["read_gain"]["source"], name
        (sample,) = prices["samples"]
        assert sample["buffer_s"] > 0 and sample["image_in_s"] > 0 and sample["image_out_s"] > 0
        expected = (sample["buffer_s"] - sample["image_in_s"]) / (
            sample["image_in_texture_bytes"] * per_byte)
        assert prices["read_gain"]["value"] == pytest.approx(expected)
        expected = (sample["buffer_s"] - sample["image_out_s"]) / (
            sample["image_out_texture_bytes"] * per_byte)
        assert prices["write_gain"]["value"] == pytest.approx(expected)
    # The class the set lacks keeps its microbenchmark.
    assert "texscope calibrate: median" in document["kernels"]["layer_norm"]["read_gain"]["source"]
    assert "built kernels" in document["created_by"]


def test_calibrate_with_kernels_runs_without_tvm(built, tmp_path):
    script = f"""
import sys
sys.modules["tvm"] = None
sys.modules["tvm_ffi"] = None
sys.path.insert(0, {str(ROOT)!r})
from texscope.opencl import calibrate
code = calibrate.main(["--shapes", "8x8", "--repeats", "1", "--kernels", {str(built)!r},
                       "-o", {str(tmp_path / "p.json")!r}])
assert not [m for m in sys.modules if m.split(".")[0] in ("tvm", "tvm_ffi") and sys.modules[m]]
sys.exit(code)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    written = json.loads((tmp_path / "p.json").read_text())
    assert "built kernels" in written["kernels"]["packed_conv"]["read_gain"]["source"]


def test_bad_kernel_sets_are_one_line_errors(built, tmp_path, capsys):
    assert main(["calibrate", "--kernels", str(tmp_path), "-o", str(tmp_path / "p.json")]) == 2
    assert "no kernel-set.json" in capsys.readouterr().err
    assert not (tmp_path / "p.json").exists()
    # Export never writes into a folder that holds something.
    assert main(["calibrate", "--export-kernels", str(built)]) == 2
    assert "not an empty folder" in capsys.readouterr().err
    manifest = json.loads((built / kernel_set.MANIFEST).read_text())
    broken = tmp_path / "broken"
    broken.mkdir()
    del manifest["cases"][0]["variants"]["image_out"]
    (broken / kernel_set.MANIFEST).write_text(json.dumps(manifest))
    assert main(["calibrate", "--kernels", str(broken), "-o", str(tmp_path / "p.json")]) == 2
    assert "needs the variants" in capsys.readouterr().err
