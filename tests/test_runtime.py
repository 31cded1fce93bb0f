"""texscope-run, the native runner of the portable program (runtime/).

It is driven as a user drives it (a subprocess) and its outputs must be
bit-equal to the Python replay's on the same OpenCL device (PoCL in CI): the
zoo networks, two MediaPipe models and a model of symbolic size at two
sizes.  Broken plans and missing files are one line on stderr, exit 2.

The binary is runtime/build/texscope-run (the README's install step builds
it) or $TEXSCOPE_RUN; where neither exists the tests skip, saying so.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from tvm import relax

import texscope
from texscope import opencl
from texscope.diagnostics import verify
from texscope.models import zoo
from texscope.opencl.plan import read_plan
from texscope.opencl.replay import replay

from modules import symbolic

ROOT = Path(__file__).resolve().parents[1]
BINARY = Path(os.environ.get("TEXSCOPE_RUN", ROOT / "runtime" / "build" / "texscope-run"))
BUILD_HINT = ("cmake -S runtime -B runtime/build -DCMAKE_BUILD_TYPE=Release && "
              "cmake --build runtime/build")

# The zoo's two long chains repeat chain64's layers and spend 20 s and 70 s
# in PoCL's compiler per runner: heavy.
HEAVY = {"chain256", "chain1024"}
MEDIAPIPE = ("hand_recrop", "face_detection_short_range")


@pytest.fixture(scope="session")
def runner():
    if not BINARY.is_file():
        pytest.skip(f"texscope-run is not built ({BINARY} missing): {BUILD_HINT}")
    return BINARY


def run(runner, *args):
    return subprocess.run([str(runner), *map(str, args)], capture_output=True, text=True)


class Builds:
    """Models built once per session into one directory, with their inputs."""

    def __init__(self, root: Path):
        self.root = root
        self.made: dict[str, tuple[Path, list]] = {}

    def get(self, name: str, make, sizes=None):
        """(build directory, random inputs at ``sizes`` for a symbolic model)."""
        if name not in self.made:
            mod = make()
            out = self.root / name
            texscope.build(mod, opencl.device_target(None, "adreno-opencl")).export(out)
            self.made[name] = (out, verify.random_inputs(mod, sizes=sizes))
        return self.made[name]


@pytest.fixture(scope="session")
def builds(tmp_path_factory):
    return Builds(tmp_path_factory.mktemp("runtime-builds"))


def zoo_model(name):
    return lambda: zoo.with_constant_weights(zoo.NETWORKS[name]())


def assert_bit_equal_to_the_replay(runner, out: Path, inputs: list, tmp_path: Path):
    tmp_path.mkdir(exist_ok=True)
    np.savez(tmp_path / "inputs.npz", *inputs)
    done = run(runner, out, "--inputs", tmp_path / "inputs.npz",
               "--save-outputs", tmp_path / "native.npz", "--times", tmp_path / "times.json")
    assert done.returncode == 0, done.stderr
    plan = read_plan(out)
    python = replay(plan, inputs)
    with np.load(tmp_path / "native.npz") as native:
        assert sorted(native.files) == sorted(plan.outputs)
        for name, want in zip(plan.outputs, python.outputs):
            assert native[name].dtype == want.dtype and native[name].shape == want.shape
            np.testing.assert_array_equal(native[name], want, err_msg=name)
    times = json.loads((tmp_path / "times.json").read_text())
    assert [(c["binding"], c["kernel"]) for c in times["commands"]] == \
        [(t.binding, t.kernel) for t in python.times]
    assert (times["images"], times["copies"], times["launches"]) == \
        (python.images, python.copies, python.launches)
    assert all(c["seconds"] > 0 for c in times["commands"])
    return done


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=(pytest.mark.real_models,) if n in HEAVY else ())
    for n in zoo.NETWORKS])
def test_zoo_outputs_are_bit_equal_to_the_python_replay(runner, builds, name, tmp_path):
    out, inputs = builds.get(name, zoo_model(name))
    assert_bit_equal_to_the_replay(runner, out, inputs, tmp_path)


@pytest.mark.parametrize("name", MEDIAPIPE)
def test_mediapipe_outputs_are_bit_equal_to_the_python_replay(runner, builds, mediapipe, name,
                                                              tmp_path):
    from texscope.frontend.tflite_model import load_tflite

    out, inputs = builds.get(name, lambda: load_tflite(mediapipe[name]))
    assert_bit_equal_to_the_replay(runner, out, inputs, tmp_path)


def test_a_symbolic_size_model_runs_at_two_sizes(runner, builds, tmp_path):
    out, _ = builds.get("symbolic", lambda: symbolic.NCHW, {"h": 16, "w": 16})
    shapes = set()
    for seed, (height, width) in enumerate([(16, 20), (33, 17)]):
        inputs = verify.random_inputs(symbolic.NCHW, seed, sizes={"h": height, "w": width})
        assert_bit_equal_to_the_replay(runner, out, inputs, tmp_path / str(seed))
        with np.load(tmp_path / str(seed) / "native.npz") as native:
            shapes.add(native[read_plan(out).outputs[0]].shape)
        expected = verify.reference_outputs(symbolic.NCHW, inputs)
        with np.load(tmp_path / str(seed) / "native.npz") as native:
            assert verify.compare([native[n] for n in read_plan(out).outputs], expected,
                                  1e-5, 1e-5).ok
    assert len(shapes) == 2
    # Without arrays, the size is unknown: said, not guessed.
    done = run(runner, out)
    assert done.returncode == 2 and "symbolic sizes (h, w): give arrays" in done.stderr
    wrong = verify.random_inputs(symbolic.NCHW, 0, sizes={"h": 16, "w": 16})
    wrong[0] = wrong[0][:, :2]
    np.savez(tmp_path / "wrong.npz", *wrong)
    done = run(runner, out, "--inputs", tmp_path / "wrong.npz")
    assert done.returncode == 2 and "input x has shape (1, 3, h, w)" in done.stderr


@pytest.fixture
def resnet(runner, builds):
    return builds.get("resnet", zoo_model("resnet"))


def test_expected_outputs_are_compared_as_the_replay_compares_them(runner, resnet, tmp_path):
    out, inputs = resnet
    np.savez(tmp_path / "inputs.npz", *inputs)
    reference = verify.reference_outputs(zoo_model("resnet")(), inputs)
    np.savez(tmp_path / "good.npz", *reference)
    np.savez(tmp_path / "bad.npz", *[r + 0.5 for r in reference])
    good = run(runner, out, "--inputs", tmp_path / "inputs.npz", "--expected", tmp_path / "good.npz")
    bad = run(runner, out, "--inputs", tmp_path / "inputs.npz", "--expected", tmp_path / "bad.npz")
    assert good.returncode == 0 and f"against {tmp_path / 'good.npz'}: max abs error" in good.stdout
    assert good.stdout.count("-> OK") == 1
    assert bad.returncode == 1 and "-> MISMATCH" in bad.stdout


def test_the_report_reads_as_the_replays(runner, resnet, tmp_path):
    out, inputs = resnet
    np.savez(tmp_path / "inputs.npz", *inputs)
    args = [f"{out}/", "--inputs", tmp_path / "inputs.npz", "--top", 3]
    native = run(runner, *args)
    python = subprocess.run([sys.executable, "-m", "texscope.opencl.replay", *map(str, args)],
                            capture_output=True, text=True, cwd=ROOT)
    assert native.returncode == python.returncode == 0, native.stderr + python.stderr
    native_lines, python_lines = native.stdout.splitlines(), python.stdout.splitlines()
    assert native_lines[0] == python_lines[0] == (
        f"ran {out / 'plan.json'} on {python_lines[0].split(' on ', 1)[1]}")
    assert len(native_lines) == len(python_lines) == 5
    assert native_lines[1].startswith("time per command (one run), slowest first (total ")
    # The same commands' rows, "  <ms> ms  <binding padded to 12> <kernel>".
    row = re.compile(r"^ +\d+\.\d{3} ms  (\S+ +)(\S+)$")
    assert all(row.match(line) for line in native_lines[2:])
    assert {row.match(x).group(2) for x in native_lines[2:]} <= {
        t.kernel for t in replay(read_plan(out), inputs).times}


def test_the_steady_state_runs_time_each_inference(runner, resnet, tmp_path):
    out, inputs = resnet
    np.savez(tmp_path / "inputs.npz", *inputs)
    done = run(runner, out, "--inputs", tmp_path / "inputs.npz", "--steady", 4, "--repeat", 2,
               "--times", tmp_path / "times.json")
    assert done.returncode == 0, done.stderr
    assert "time per command (median of 2)" in done.stdout
    assert "ms per inference (wall, median of 4;" in done.stdout
    times = json.loads((tmp_path / "times.json").read_text())
    assert times["runs"] == 2 and times["steady"]["inferences"] == 4
    steady = times["steady"]
    assert 0 < steady["min_s"] <= steady["median_s"]
    assert 0 < steady["submit_median_s"] <= steady["median_s"]


def test_devices_are_listed_as_the_replay_lists_them(runner):
    from texscope.opencl.source import devices

    done = run(runner, "--list-devices")
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    assert len(lines) == len(devices())
    assert lines[0].startswith("0: " + devices()[0].name.strip() + " (")


def _copy(out: Path, tmp_path: Path) -> Path:
    broken = tmp_path / "broken"
    shutil.copytree(out, broken)
    return broken


def _edit_plan(edit):
    def apply(directory: Path):
        data = json.loads((directory / "plan.json").read_text())
        text = edit(data)
        (directory / "plan.json").write_text(text if isinstance(text, str) else json.dumps(data))
    return apply


def _first_kernel(data):
    return next(s for s in data["steps"] if s["kind"] == "kernel")


def _image_held_in_a_buffer(data):
    """The plan holds a tensor in a buffer, everywhere; its kernels still
    declare an image for it."""
    step = _first_kernel(data)
    name = next(a["tensor"] for a in step["args"] if a.get("scope", "").startswith("global.tex"))
    for tensor in data["tensors"]:
        if tensor["name"] == name:
            tensor["scope"] = "global"
    for s in data["steps"]:
        for a in s.get("args", []):
            if a.get("tensor") == name:
                a["scope"] = "global"


def _scope_disagrees(data):
    arg = next(a for a in _first_kernel(data)["args"] if "tensor" in a)
    arg["scope"] = "global.texture-nhwc"


def _image_over_the_limits(data):
    tensor = next(t for t in data["tensors"] if t["scope"] == "global.texture-weight"
                  and t["name"] not in data["constants"])
    tensor["shape"] = [1, 1, 1, 100000, 4]


@pytest.mark.parametrize("breakage, message", [
    (_edit_plan(lambda d: d.update(version=99)),
     "plan version 99; this texscope reads versions 1 to 2"),
    (_edit_plan(lambda d: d.update(format="other")), "not a texscope OpenCL plan"),
    (_edit_plan(lambda d: d.pop("steps")), "incomplete plan (KeyError: 'steps')"),
    (_edit_plan(lambda d: d.update(tensors=[t for t in d["tensors"]
                                            if t["name"] != d["outputs"][0]])),
     "steps name tensors the plan does not declare"),
    (_edit_plan(lambda d: '{\n "format": "texscope-opencl-plan",\n oops\n}'),
     "plan.json:3: not JSON"),
    (_edit_plan(lambda d: _first_kernel(d).update(global_size=["h * 2", 1, 1])),
     "uses h, not among the plan's sizes (none)"),
    (_edit_plan(lambda d: _first_kernel(d).update(global_size=["2 ** 3", 1, 1])),
     "size expression '2 ** 3' does not parse"),
    (_edit_plan(lambda d: _first_kernel(d).update(kernel="no_such_kernel")),
     "binding 'lv': kernel no_such_kernel is not in the OpenCL source"),
    (_edit_plan(_scope_disagrees), "but the program holds it in 'global.texture-weight'"),
    (_edit_plan(_image_held_in_a_buffer),
     "held in 'global'; textures are image2d_array_t images and buffers otherwise"),
    (_edit_plan(_image_over_the_limits), "texels x 1 layers, over this device's"),
    (lambda d: (d / "kernels.cl").unlink(), "incomplete plan (OSError:"),
    (lambda d: (d / "weights.npz").unlink(), "incomplete plan (OSError:"),
    (lambda d: (d / "weights.npz").write_bytes(b"not a zip"), "not an .npz"),
    (lambda d: (d / "kernels.cl").write_text((d / "kernels.cl").read_text() + "\nnot OpenCL;\n"),
     "rejects the kernels"),
    (lambda d: (d / "plan.json").unlink(), "no plan.json; write one with `texscope build"),
], ids=["version", "format", "no-steps", "undeclared-tensor", "not-json", "unknown-size",
        "bad-expression", "missing-kernel", "scope", "declaration", "image-limit",
        "no-kernels-file", "no-weights-file", "weights-not-zip", "compiler-error", "no-plan"])
def test_a_broken_build_is_one_line_exit_2(runner, resnet, tmp_path, breakage, message):
    broken = _copy(resnet[0], tmp_path)
    breakage(broken)
    done = run(runner, broken)
    assert done.returncode == 2, done.stdout
    assert done.stdout == ""
    assert done.stderr.startswith("texscope-run: error: ") and done.stderr.count("\n") == 1
    assert message in done.stderr


def test_bad_input_files_are_named_and_nothing_is_overwritten(runner, resnet, tmp_path):
    out, inputs = resnet
    np.savez_compressed(tmp_path / "packed.npz", *inputs)
    np.savez(tmp_path / "wrong.npz", nothing=np.zeros(1))
    np.savez(tmp_path / "named.npz", x=inputs[0].astype("float64"))
    mine = tmp_path / "mine.npz"
    mine.write_bytes(b"the user's")
    for args, message in [
        (("--inputs", tmp_path / "packed.npz"), "is compressed; write the file with np.savez"),
        (("--inputs", tmp_path / "wrong.npz"), "inputs must be named x (or be arr_0..arr_0); "
                                               "it has nothing"),
        (("--inputs", tmp_path / "missing.npz"), "cannot read inputs"),
        (("--save-outputs", mine), "exists; texscope-run writes only new files"),
        (("--device", 7), "no OpenCL device 7; there are 0: "),
        (("--repeat", "two"), "argument --repeat: invalid int value: 'two'"),
    ]:
        done = run(runner, out, *args)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert message in done.stderr
    assert mine.read_bytes() == b"the user's"
    # Inputs by name, of another dtype, are cast as the replay casts them.
    done = run(runner, out, "--inputs", tmp_path / "named.npz",
               "--save-outputs", tmp_path / "outputs.npz")
    assert done.returncode == 0, done.stderr
    with np.load(tmp_path / "outputs.npz") as native:
        np.testing.assert_array_equal(native["gv"], replay(read_plan(out), inputs).outputs[0])


def test_weights_npz_is_stored_uncompressed_for_the_native_reader(resnet):
    """The runner reads stored zip entries only: the plan's writer must keep
    using np.savez."""
    with zipfile.ZipFile(resnet[0] / "weights.npz") as weights:
        assert {entry.compress_type for entry in weights.infolist()} == {zipfile.ZIP_STORED}


def test_the_flavours_the_runner_folds_are_the_knowledge_bases():
    from texscope.knowledge.scopes import FLAVOUR_AXES

    source = (ROOT / "runtime" / "src" / "runner.cpp").read_text()
    for scope, (layers, height, width) in FLAVOUR_AXES.items():
        braced = ", ".join("{" + ", ".join(map(str, axes)) + "}" for axes in (layers, height, width))
        assert f'{{"{scope}", {braced}}}' in source, scope


def _installed_driver() -> str | None:
    vendors = Path(os.environ.get("OCL_ICD_VENDORS", "/etc/OpenCL/vendors"))
    files = sorted(vendors.glob("*.icd")) if vendors.is_dir() else [vendors]
    for file in files:
        if file.is_file() and (library := file.read_text().strip()):
            return library
    return None


def test_a_driver_is_used_directly_where_no_loader_is_chosen(runner, resnet, tmp_path):
    """TEXSCOPE_OPENCL_LIBRARY names the library to open: a loader, or (as
    on a machine without ocl-icd) a vendor's driver, used through its
    dispatch table; the outputs are the loader's, bit for bit."""
    driver = _installed_driver()
    if driver is None:
        pytest.skip("no OpenCL vendor (.icd) file names a driver library")
    out, inputs = resnet
    np.savez(tmp_path / "inputs.npz", *inputs)
    for name, library in (("loader", None), ("driver", driver)):
        env = dict(os.environ)
        if library:
            env["TEXSCOPE_OPENCL_LIBRARY"] = library
        done = subprocess.run([str(runner), str(out), "--inputs", str(tmp_path / "inputs.npz"),
                               "--save-outputs", str(tmp_path / f"{name}.npz")],
                              capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr
    with np.load(tmp_path / "loader.npz") as loader, np.load(tmp_path / "driver.npz") as direct:
        np.testing.assert_array_equal(loader["gv"], direct["gv"])
    env = dict(os.environ, TEXSCOPE_OPENCL_LIBRARY=str(tmp_path / "libOpenCL-nowhere.so"))
    done = subprocess.run([str(runner), "--list-devices"], capture_output=True, text=True, env=env)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert done.stderr.startswith("texscope-run: error: no OpenCL library loads (")
    assert "TEXSCOPE_OPENCL_LIBRARY" in done.stderr


def test_half_kernels_on_a_device_without_fp16_are_refused_as_the_replay_refuses(runner,
                                                                                 builds):
    from texscope.opencl.source import devices

    if "cl_khr_fp16" in devices()[0].extensions.split():
        pytest.skip("the first OpenCL device has cl_khr_fp16")
    out, inputs = builds.get("seed-float16", lambda: relax.transform.ToMixedPrecision(
        out_dtype="float16")(zoo_model("seed")()))
    done = run(runner, out)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "lacks cl_khr_fp16, which these kernels need" in done.stderr
