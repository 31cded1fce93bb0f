"""texscope-run --tune: a tuning set timed without Python.

The runner's tuning file must be the Python tuner's (python -m
texscope.opencl.tune): the same keys, variants, copies and device
description, accepted by `texscope build --tuning`; a broken set is one line
on stderr, exit 2, nothing written.  Driven as a user drives both (the
installed commands, subprocesses) on PoCL.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from texscope.diagnostics import verify
from texscope.frontend.model_file import load_model
from texscope.opencl import tuning
from texscope.opencl.plan import read_plan
from texscope.opencl.replay import random_inputs, replay
from texscope.opencl.source import pick_device

ROOT = Path(__file__).resolve().parents[1]
BINARY = Path(os.environ.get("TEXSCOPE_RUN", ROOT / "runtime" / "build" / "texscope-run"))
MODEL = ("from texscope.models import zoo\n"
         "mod = zoo.with_constant_weights(zoo.NETWORKS['inception']())\n")
REPEATS = 3


def run(*args):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """The zoo's inception block: its tuning set, timed by both tuners."""
    pytest.importorskip("pyopencl")
    if not BINARY.is_file():
        pytest.skip(f"texscope-run is not built ({BINARY} missing): cmake -S runtime -B "
                    "runtime/build -DCMAKE_BUILD_TYPE=Release && cmake --build runtime/build")
    root = tmp_path_factory.mktemp("runtime-tune")
    (root / "model.py").write_text(MODEL)
    made = run("texscope", "tune", root / "model.py", "--target", "adreno-opencl",
               "-o", root / "set")
    assert made.returncode == 0, made.stderr
    python = run(sys.executable, "-m", "texscope.opencl.tune", root / "set",
                 "-o", root / "python.json", "--repeats", REPEATS)
    assert python.returncode == 0, python.stderr
    native = run(BINARY, "--tune", root / "set", "-o", root / "native.json",
                 "--repeats", REPEATS)
    assert native.returncode == 0, native.stderr
    assert native.stdout.startswith("timed 19 variants of 6 kernels and 4 copies on ")
    return root


SPREAD = ("seconds", "min_seconds", "max_seconds")


def _without_seconds(entries):
    return [{k: v for k, v in entry.items() if not k.endswith("seconds")} for entry in entries]


def test_the_runner_writes_the_python_tuners_file(tuned):
    python = json.loads((tuned / "python.json").read_text())
    native = tuning.load(tuned / "native.json")
    assert list(native) == list(python)
    for field in ("format", "version", "model", "model_fingerprint", "target", "repeats"):
        assert native[field] == python[field], field
    assert native["device"]["source"] == "clGetDeviceInfo through texscope-run"
    assert {**native["device"], "source": None} == {**python["device"], "source": None}
    assert native["method"] == python["method"].replace(
        "python -m texscope.opencl.tune", "texscope-run --tune")
    assert list(native["kernels"]) == list(python["kernels"])
    for key, kernel in python["kernels"].items():
        mine = native["kernels"][key]
        assert list(mine) == list(kernel)
        assert {k: mine[k] for k in ("name", "positions", "shapes")} == \
            {k: kernel[k] for k in ("name", "positions", "shapes")}
        assert _without_seconds(mine["variants"]) == _without_seconds(kernel["variants"])
    assert _without_seconds(native["copies"]) == _without_seconds(python["copies"])
    times = [v["seconds"] for k in native["kernels"].values() for v in k["variants"]]
    times += [c["seconds"] for c in native["copies"]]
    assert all(0 < t < 1 for t in times)
    entries = [v for k in native["kernels"].values() for v in k["variants"]] + native["copies"]
    assert all(e["min_seconds"] <= e["seconds"] <= e["max_seconds"] for e in entries)
    # Both run the model's own all-buffer, all-texture and default programs whole.
    assert list(native["in_place"]) == list(python["in_place"]) == \
        ["function", tuning.DEFAULT_PROFILE, *tuning.IN_PLACE_LABELS, tuning.DEFAULT]
    assert native["in_place"][tuning.DEFAULT_PROFILE] == \
        tuning.read_set(tuned / "set")["in_place"][tuning.DEFAULT_PROFILE]
    assert native["in_place"]["function"] == python["in_place"]["function"] == "main"
    for label in (*tuning.IN_PLACE_LABELS, tuning.DEFAULT):
        whole = native["in_place"][label]
        assert list(whole) == list(SPREAD)
        assert 0 < whole["min_seconds"] <= whole["seconds"] <= whole["max_seconds"] < 1


def test_the_runner_runs_an_earlier_plan_whole_as_the_python_tuner(tuned):
    """A second round (texscope tune --tuning): both tuners run the plan the
    earlier file chose beside the extremes, and carry that file."""
    made = run("texscope", "tune", tuned / "model.py", "--target", "adreno-opencl",
               "--tuning", tuned / "python.json", "-o", tuned / "set2")
    assert made.returncode == 0, made.stderr
    files = {}
    for name, command in (("python", (sys.executable, "-m", "texscope.opencl.tune")),
                          ("native", (BINARY, "--tune"))):
        done = run(*command, tuned / "set2", "-o", tuned / f"{name}2.json", "--repeats", REPEATS)
        assert done.returncode == 0, done.stderr
        files[name] = tuning.load(tuned / f"{name}2.json")
    python, native = files["python"], files["native"]
    assert list(native) == list(python)
    assert list(native["in_place"]) == ["function", tuning.DEFAULT_PROFILE,
                                        *tuning.IN_PLACE_LABELS, tuning.DEFAULT, tuning.PREVIOUS]
    assert list(native["in_place"]["previous"]) == list(SPREAD)
    assert native["previous_tuning"] == python["previous_tuning"] == \
        json.loads((tuned / "python.json").read_text())
    assert native["method"] == python["method"].replace(
        "python -m texscope.opencl.tune", "texscope-run --tune")
    assert "the model's all-buffer, all-texture, default, previous programs then run whole" \
        in native["method"]


def _with_times_of(document: dict, timed: dict) -> dict:
    """``document`` with every variant's and copy's seconds taken from ``timed``."""
    out = json.loads(json.dumps(document))
    for key, kernel in out["kernels"].items():
        for variant, measured in zip(kernel["variants"], timed["kernels"][key]["variants"],
                                     strict=True):
            variant.update({k: measured[k] for k in SPREAD})
    for copy, measured in zip(out["copies"], timed["copies"], strict=True):
        copy.update({k: measured[k] for k in SPREAD})
    out["in_place"] = timed["in_place"]
    return out


def test_texscope_build_takes_the_runners_tuning_file(tuned):
    python = json.loads((tuned / "python.json").read_text())
    native = json.loads((tuned / "native.json").read_text())
    # The Python tuner's file holding the runner's times: the build must read
    # both files alike, so plan the same.  (The two tuners' own times are
    # PoCL's, noisy: variants a few percent apart trade places between runs.)
    (tuned / "python-ranked.json").write_text(json.dumps(_with_times_of(python, native)))
    outs = {}
    for name in ("native", "python-ranked"):
        built = run("texscope", "build", tuned / "model.py", "--target", "adreno-opencl",
                    "--tuning", tuned / f"{name}.json", "-o", tuned / f"out-{name}")
        assert built.returncode == 0, built.stderr
        assert "0 calls by the cost profile" in built.stdout
        outs[name] = tuned / f"out-{name}"
    report = json.loads((outs["native"] / "report.json").read_text())
    assert report["kernels"] and report["untuned"] == []
    ranked = json.loads((outs["python-ranked"] / "report.json").read_text())
    assert [k["chosen"] for k in ranked["kernels"]] == [k["chosen"] for k in report["kernels"]]
    assert (outs["native"] / "plan.json").read_text() == \
        (outs["python-ranked"] / "plan.json").read_text()
    plan = read_plan(outs["native"])
    inputs = random_inputs(plan)
    outputs = replay(plan, inputs, pick_device(0)).outputs
    expected = verify.reference_outputs(load_model(str(tuned / "model.py")), inputs)
    for got, want in zip(outputs, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_a_tuning_file_is_overwritten_and_nothing_else(tuned, tmp_path):
    shutil.copy(tuned / "native.json", tmp_path / "again.json")
    again = run(BINARY, "--tune", tuned / "set", "-o", tmp_path / "again.json", "--repeats", 1)
    assert again.returncode == 0, again.stderr
    assert json.loads((tmp_path / "again.json").read_text())["repeats"] == 1


def _rewrite_manifest(change):
    def breakage(root: Path):
        path = root / "tuning-set.json"
        manifest = json.loads(path.read_text())
        change(manifest)
        path.write_text(json.dumps(manifest))
    return breakage


BREAKAGES = {
    "no manifest": (lambda d: (d / "tuning-set.json").unlink(),
                    "no such tuning set (write one with `texscope tune MODEL -o DIR`)"),
    "not JSON": (lambda d: (d / "tuning-set.json").write_text('{"format":\n'),
                 "tuning-set.json, line 2: not JSON"),
    "a build, not a set": (_rewrite_manifest(lambda m: m.update(format="texscope-opencl-plan")),
                           "not a texscope tuning set"),
    "no copies": (_rewrite_manifest(lambda m: m.pop("copies")), "tuning-set.json: no 'copies'"),
    "an unknown kernel": (_rewrite_manifest(lambda m: m["variants"][0].update(kernel="nope")),
                          "variant 'v0' names no kernel of the set"),
    "a binding never run": (_rewrite_manifest(lambda m: m["copies"][0].update(binding="zz")),
                            "the program runs nothing for binding 'zz'"),
    "no program": (lambda d: shutil.rmtree(d / "program"), "program: no plan.json"),
    "no weights named": (_rewrite_manifest(lambda m: [v.pop("weights") for v in m["variants"]]),
                         "its variants name no weights (a set written by an older texscope): "
                         "write it again with `texscope tune MODEL -o DIR`"),
    "a malformed in_place": (_rewrite_manifest(lambda m: m["in_place"]["programs"].pop("all-texture")),
                             "\"in_place\" must name a function and a program folder for each "
                             "of all-buffer, all-texture"),
    "a previous program without its tuning": (
        _rewrite_manifest(lambda m: m["in_place"]["programs"].update(previous="in-place/x")),
        "a \"previous\" program goes with the \"previous_tuning\" that chose it"),
    "no all-texture program": (lambda d: shutil.rmtree(d / "in-place" / "all-texture"),
                               "all-texture: no plan.json"),
    "an in-place program of no known plan": (
        _rewrite_manifest(lambda m: m["in_place"]["programs"].update(fastest="in-place/default")),
        "\"in_place\" must name a function and a program folder for each "
        "of all-buffer, all-texture"),
    "no default program": (lambda d: shutil.rmtree(d / "in-place" / "default"),
                           "default: no plan.json"),
    "a default program without its profile": (
        _rewrite_manifest(lambda m: m["in_place"].pop("default_profile")),
        "a \"default\" program goes with the \"default_profile\" that chose it"),
    "no neighbours": (lambda d: (d / "neighbours.cl").unlink(),
                      "no neighbours.cl (a set written by an older texscope): write it again "
                      "with `texscope tune MODEL -o DIR`"),
}


@pytest.mark.parametrize("name", list(BREAKAGES))
def test_a_broken_tuning_set_is_one_line_exit_2(tuned, tmp_path, name):
    breakage, message = BREAKAGES[name]
    broken = tmp_path / "set"
    shutil.copytree(tuned / "set", broken)
    breakage(broken)
    done = run(BINARY, "--tune", broken, "-o", tmp_path / "tuning.json", "--repeats", 1)
    assert done.returncode == 2, done.stdout
    assert done.stderr.startswith("texscope-run: error: ") and done.stderr.count("\n") == 1
    assert message in done.stderr, done.stderr
    assert not (tmp_path / "tuning.json").exists()


@pytest.mark.parametrize("args, message", [
    (("-o", "{tmp}/model.py"), "model.py exists and is not a tuning file; not overwriting it"),
    (("-o", "{tmp}/t.json", "--repeats", "0"), "--repeats must be at least 1"),
    ((), "--tune needs -o TUNING.json"),
    (("-o", "{tmp}/t.json", "--device", "99"), "no OpenCL device 99; there are 0: "),
])
def test_bad_tune_arguments_are_one_line_exit_2(tuned, tmp_path, args, message):
    (tmp_path / "model.py").write_text(MODEL)
    done = run(BINARY, "--tune", tuned / "set", *(a.format(tmp=tmp_path) for a in args))
    assert done.returncode == 2
    assert done.stderr.startswith("texscope-run: error: ") and done.stderr.count("\n") == 1
    assert message in done.stderr, done.stderr
    assert (tmp_path / "model.py").read_text() == MODEL and not (tmp_path / "t.json").exists()


def test_the_build_checks_the_runners_device_against_the_cost_profiles(tuned, tmp_path):
    """A cost profile measured on the device the Python tuner names takes
    the runner's file; one measured on another device refuses it."""
    profile = json.loads((ROOT / "texscope" / "knowledge" / "profiles" / "adreno.json")
                         .read_text())
    python = json.loads((tuned / "python.json").read_text())
    for name, device, accepted in (("here", python["device"], True),
                                   ("phone", {"name": "Mali-G78"}, False)):
        (tmp_path / f"{name}.json").write_text(json.dumps({**profile, "device": device}))
        built = run("texscope", "build", tuned / "model.py", "--target", "adreno-opencl",
                    "--cost-profile", tmp_path / f"{name}.json",
                    "--tuning", tuned / "native.json", "-o", tmp_path / f"out-{name}")
        if accepted:
            assert built.returncode == 0, built.stderr
        else:
            assert built.returncode == 2 and len(built.stderr.strip().splitlines()) == 1
            assert f"native.json was measured on {python['device']['name']!r}, the cost " \
                   "profile on 'Mali-G78'" in built.stderr, built.stderr
            assert not (tmp_path / f"out-{name}").exists()
