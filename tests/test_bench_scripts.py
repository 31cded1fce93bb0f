"""The bench scripts, run as a user runs them: a name none of them knows is
a usage error (exit status 2, one line saying which), never a traceback or
an empty table."""

import argparse
import os
import re
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from texscope.opencl.plan import KernelStep, read_plan

ROOT = Path(__file__).resolve().parents[1]
BENCHES = sorted(path.name for path in (ROOT / "bench").glob("*.py")
                 if not path.name.startswith("_"))


def test_every_bench_script_is_covered():
    assert len(BENCHES) >= 9 and "build_speed.py" in BENCHES


@pytest.mark.parametrize("bench", BENCHES)
def test_a_bench_refuses_a_model_it_does_not_know(mediapipe, bench):
    done = subprocess.run([sys.executable, str(ROOT / "bench" / bench), "no_such_model"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and done.stdout == ""
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"{bench}: error:") and "no_such_model" in last


def test_the_all_buffer_build_holds_no_image_even_of_one_texel():
    """The benches' all-buffer build: a squeeze-and-excitation block's
    1 x 1 maps ([1, 1, 1, 1, 4]) fit limits of 1 texel as images; none
    fits now."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    from tvm import relax  # pylint: disable=import-outside-toplevel

    import texscope  # pylint: disable=import-outside-toplevel
    from texscope import opencl  # pylint: disable=import-outside-toplevel

    sys.path.insert(0, str(ROOT / "bench"))
    import opencl_run  # pylint: disable=import-outside-toplevel

    weight = relax.const(np.random.default_rng(0).normal(0, 0.5, (4, 4, 1, 1)).astype("float32"))
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 8, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            pooled = bb.emit(relax.op.nn.adaptive_avg_pool2d(x, (1, 1)))
            squeezed = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(pooled, weight)))
            gate = bb.emit(relax.op.sigmoid(relax.op.nn.conv2d(squeezed, weight)))
            out = bb.emit_output(bb.emit(relax.op.multiply(x, gate)))
        bb.emit_func_output(out)
    builds = opencl_run.targets("adreno-opencl")
    builds["limits of one texel"] = dict(builds["buffers"], texture_spatial_limit=1,
                                         texture_depth_limit=1)
    images = {name: sum(spec.is_texture for spec in
                        opencl.plan_of(texscope.build(bb.get(), target)).tensors.values())
              for name, target in builds.items()}
    assert images == {"textures": 5, "buffers": 0, "limits of one texel": 2}


def test_opencl_run_refuses_a_replay_of_a_missing_folder(tmp_path):
    missing = tmp_path / "not_exported"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "opencl_run.py"), "--replay",
                           str(missing)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr and done.stdout == ""
    assert done.stderr.strip().splitlines()[-1].endswith("no such folder (opencl_run.py --export "
                                                          "writes one)")
    assert not missing.exists()


@pytest.mark.parametrize("bench", ["opencl_run.py", "kernel_pairs.py", "calibrated.py",
                                   "native_runner.py"])
def test_a_replay_of_a_folder_with_no_export_is_a_usage_error(tmp_path, bench):
    done = subprocess.run([sys.executable, str(ROOT / "bench" / bench), "--replay",
                           str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr and done.stdout == ""
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"{bench}: error: {tmp_path}: no export in it (no folder holds ")


def test_the_real_models_bench_checks_the_texture_build_against_tflite(mediapipe):
    """The OpenCL outputs against the CPU build of the same module and
    against TFLite's interpreter: the second checks the import as well."""
    pytest.importorskip("ai_edge_litert")
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "real_models.py"),
                           "iris_landmark"], capture_output=True, text=True, cwd=ROOT,
                          timeout=600, check=True)
    header, _, row = [line for line in done.stdout.splitlines() if line.startswith("|")]
    columns = [cell.strip() for cell in header.strip("|").split("|")]
    cells = dict(zip(columns, (cell.strip() for cell in row.strip("|").split("|"))))
    assert cells["model"] == "iris_landmark" and cells["copies"] == "0"
    assert float(cells["max error / output scale"]) < 1e-5
    assert float(cells["against TFLite"]) < 1e-5


def test_markdown_writes_the_scripts_section_and_replaces_only_it(tmp_path):
    """``--markdown``: the printed table goes into the benchmarks file under a
    heading with the date, the device and the commit; a second run replaces
    that section and leaves the others as they were."""
    target = tmp_path / "benchmarks.md"
    other = "<!-- bench:other.py -->\n## other.py\n\nkept\n<!-- /bench:other.py -->\n"
    target.write_text("# Benchmarks\n\nprose\n\n" + other)
    env = {**os.environ, "TEXSCOPE_BENCHMARKS_MD": str(target)}
    for _ in range(2):
        done = subprocess.run([sys.executable, str(ROOT / "bench" / "layout_conversion.py"),
                               "inception", "--markdown"], capture_output=True, text=True,
                              cwd=ROOT, timeout=300, env=env, check=True)
    text = target.read_text()
    assert text.startswith("# Benchmarks\n\nprose\n\n" + other)
    assert text.count("<!-- bench:layout_conversion.py -->") == 1
    section = text[text.index("<!-- bench:layout_conversion.py -->"):]
    heading = section.splitlines()[3]
    assert re.match(r"Ran \d{4}-\d\d-\d\d \d\d:\d\d UTC on .+ CPUs .*, commit \w+", heading)
    table = [line for line in done.stdout.splitlines() if line.startswith(("network", "inception"))]
    assert len(table) == 2 and "\n".join(table) in section
    assert section.endswith("<!-- /bench:layout_conversion.py -->\n")
def _bench(*args, check=True, markdown=None):
    """Run bench script ``args[0]``; ``markdown``: the file its ``--markdown`` writes."""
    env = {**os.environ, **({"TEXSCOPE_BENCHMARKS_MD": str(markdown)} if markdown else {})}
    return subprocess.run([sys.executable, str(ROOT / "bench" / args[0]), *map(str, args[1:])],
                          capture_output=True, text=True, cwd=ROOT, timeout=600, check=check,
                          env=env)


def test_kernel_pairs_times_every_kernel_both_ways_after_an_export(tmp_path):
    """Export here, replay (TVM-free) from the folder: one row per launch of
    both builds, each kernel classified, both builds matching the CPU."""
    _bench("kernel_pairs.py", "--export", tmp_path / "out", "zoo/inception")
    done = _bench("kernel_pairs.py", "--replay", tmp_path / "out", "--repeat", "1",
                  "--json", tmp_path / "pairs.json", "--markdown", markdown=tmp_path / "bench.md")
    written = json.loads((tmp_path / "pairs.json").read_text())
    pairs = written["pairs"]
    launches = [sum(isinstance(s, KernelStep) for s in read_plan(tmp_path / "out" /
                                                                 "zoo_inception" / b).steps)
                for b in ("textures", "buffers")]
    assert 0 < len(pairs) <= min(launches)
    builds = written["models"]["zoo_inception"]
    assert [builds[b]["launches"] for b in ("textures", "buffers")] == launches
    assert builds["textures"]["ok"] and builds["buffers"]["ok"]
    assert {p["kind"] for p in pairs} == {"kxk conv", "pool", "layout", "reduction"}
    assert all(p["textures_s"] > 0 and p["buffers_s"] > 0 for p in pairs)
    row = next(line for line in done.stdout.splitlines() if line.startswith("| zoo_inception |"))
    assert row.endswith("| yes, yes |")
    assert f"| {len(pairs)} +{launches[0] - len(pairs)}/+{launches[1] - len(pairs)} |" in row
    # The section names the commit the export was built at: a replay on a
    # copy without .git still says which code made the kernels.
    meta = json.loads((tmp_path / "out" / "meta.json").read_text())
    assert meta["target"] == "adreno-opencl" and meta["commit"] != "unknown"
    section = (tmp_path / "bench.md").read_text().split("<!-- bench:kernel_pairs.py -->\n")[1]
    assert re.match(r"## kernel_pairs.py\n\nRan \d{4}-\d\d-\d\d \d\d:\d\d UTC on .+, driver .+\), "
                    rf"commit \S+ \(the export built at {meta['commit']} for adreno-opencl\):",
                    section)
    assert row in section and section.endswith("<!-- /bench:kernel_pairs.py -->\n")


def test_kernel_pairs_exports_with_a_preset_option_set(tmp_path):
    """``--preset-option`` builds with a preset field set (here the nvidia
    preset's fetching ahead turned off: the texture build's convs change,
    the buffer build's do not), and the export's meta says so; ``--against``
    replays the two in the same rounds, before and after side by side; an
    unknown field, no round, a second export without the model are refused
    in one line, exit 2."""
    for name, options in (("default", ()), ("one", ("--preset-option", "conv_texels_ahead=1"))):
        _bench("kernel_pairs.py", "--export", tmp_path / name, "--target", "nvidia-opencl",
               *options, "zoo/inception")
    kernels = {name: {b: (tmp_path / name / "zoo_inception" / b / "kernels.cl").read_text()
                      for b in ("textures", "buffers")} for name in ("default", "one")}
    assert kernels["default"]["buffers"] == kernels["one"]["buffers"]
    assert kernels["default"]["textures"] != kernels["one"]["textures"]
    # Every conv of the textures build reads its map from an image.
    plan = read_plan(tmp_path / "default" / "zoo_inception" / "textures")
    convs = [s for s in plan.steps if isinstance(s, KernelStep) and "conv2d_NCHWc" in s.kernel]
    assert convs and all(s.args[0].scope.startswith("global.texture") for s in convs)
    metas = [json.loads((tmp_path / name / "meta.json").read_text())["target"]
             for name in ("default", "one")]
    assert metas == ["nvidia-opencl", "nvidia-opencl conv_texels_ahead=1"]
    # The two exports replayed in the same two rounds: before (fetching
    # ahead off) and after, side by side, each build matching the CPU.
    done = _bench("kernel_pairs.py", "--replay", tmp_path / "default", "--against",
                  tmp_path / "one", "--rounds", "2", "--repeat", "1")
    assert "(round 2 of 2)" in done.stderr
    assert "Against the export built at " in done.stdout
    assert " for nvidia-opencl conv_texels_ahead=1, replayed in the same rounds" in done.stdout
    compared = done.stdout.split("Against the export ")[1].splitlines()
    model = next(line for line in compared if line.startswith("| zoo_inception |"))
    total = next(line for line in compared if line.startswith("| all |"))
    assert model.split(" | ")[1:] == total.split(" | ")[1:]  # one model: the sum is its row
    assert "| kxk conv | " in done.stdout
    assert re.search(r"\| zoo_inception \| \d+ \+\d+/\+\d+ \|.*\| yes, yes \|", done.stdout)
    for bad, message in ((("--rounds", "0"), "--rounds 0: at least 1"),
                         (("--against", tmp_path / "nowhere"),
                          f"--against {tmp_path / 'nowhere'}: no export of zoo_inception in it")):
        refused = _bench("kernel_pairs.py", "--replay", tmp_path / "default", *bad, check=False)
        assert refused.returncode == 2 and refused.stdout == ""
        assert refused.stderr.strip().splitlines()[-1].endswith(message)
    done = _bench("kernel_pairs.py", "--export", tmp_path / "bad", "--target", "nvidia-opencl",
                  "--preset-option", "texels=3", "zoo/inception", check=False)
    assert done.returncode == 2 and not (tmp_path / "bad").exists()
    assert done.stderr.strip().splitlines()[-1].endswith(
        "--preset-option texels=3: nvidia has no integer or boolean field 'texels'")


def test_texel_fetch_times_each_storage_and_checks_each_sum(tmp_path):
    """Five kernels a map (buffer and image, one fetch at a time and N
    ahead, an image output), a chain of three 1x1 convs in buffers and in
    images, the same staged in local memory, and a fan of three reading one
    map, each checked against numpy: a map of 20 channel blocks leaves a
    partial step of 16 ahead and a partial stage of 16 (its work-group 2 x 1
    pixels x 4 output blocks); the section goes to docs/benchmarks.md with
    --markdown; a bad --ahead is refused."""
    done = _bench("texel_fetch.py", "6x5x20", "--repeat", "1", "--chain", "3", "--markdown",
                  markdown=tmp_path / "bench.md")
    rows = [line.split(" | ") for line in done.stdout.splitlines() if line.startswith("| 6x5x20")]
    assert [row[1] for row in rows] == ["buffer", "buffer, 16 ahead", "image", "image, 16 ahead",
                                        "image, 16 ahead, image out", "chain: buffers",
                                        "chain: images", "chain: images, half",
                                        "chain: buffers, staged", "chain: images, staged",
                                        "fan: buffers", "fan: images"]
    assert all(row[-1] == "yes |" for row in rows)
    assert rows[0][3] == rows[5][3] == rows[10][3] == "1.00"
    assert "| 6x5x20 | image, 16 ahead |" in (tmp_path / "bench.md").read_text()
    done = _bench("texel_fetch.py", "--ahead", "0", check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines()[-1].endswith("--ahead 0: between 1 and 64")


def test_fuzz_replay_replays_the_drawn_modules_and_names_a_mismatch(tmp_path):
    _bench("fuzz_replay.py", "--export", tmp_path / "fuzz", "--count", "3")
    recipes = json.loads((tmp_path / "fuzz" / "recipes.json").read_text())
    assert len({r["recipe"] for r in recipes}) == 3
    done = _bench("fuzz_replay.py", "--replay", tmp_path / "fuzz")
    assert "3 of 3 random modules match the CPU" in done.stdout
    first = tmp_path / "fuzz" / recipes[0]["index"]
    with np.load(first / "expected.npz") as expected:
        np.savez(first / "expected.npz", *[a + 1.0 for a in expected.values()])
    done = _bench("fuzz_replay.py", "--replay", tmp_path / "fuzz", check=False)
    assert done.returncode == 1 and f"{recipes[0]['index']} MISMATCH" in done.stdout


def test_vs_litert_runs_litert_and_both_builds_on_the_same_inputs(mediapipe, tmp_path):
    pytest.importorskip("ai_edge_litert")
    _bench("vs_litert.py", "--export", tmp_path / "out", "hand_recrop")
    assert (tmp_path / "out" / "hand_recrop" / "model.tflite").is_file()
    _bench("vs_litert.py", "--replay", tmp_path / "out", "--runs", "2", "--rounds", "1",
           "--json", tmp_path / "rows.json")
    row = json.loads((tmp_path / "rows.json").read_text())["models"]["hand_recrop"]
    assert row["litert_cpu"]["seconds"] > 0 and len(row["textures"]["rounds"]) == 1
    for build in ("textures", "buffers"):
        assert row[build]["error"] < 1e-4
@pytest.mark.real_models  # heavy (four processes, PoCL timing): run with -m real_models
def test_the_tuned_bench_runs_its_four_steps_on_pocl(tmp_path):
    pytest.importorskip("pyopencl")
    bench = [sys.executable, str(ROOT / "bench" / "tuned.py")]
    out = tmp_path / "out"
    steps = [["--export", str(out), "zoo/inception"], ["--tune", str(out), "--repeats", "1"],
             ["--export-tuned", str(out), "--tuning-from", str(out), "zoo/inception"],
             ["--replay", str(out), "--markdown"]]
    env = {**os.environ, "TEXSCOPE_BENCHMARKS_MD": str(tmp_path / "table.md")}
    for step in steps:
        done = subprocess.run(bench + step, capture_output=True, text=True, cwd=ROOT, timeout=600,
                              env=env)
        assert done.returncode == 0, done.stderr[-2000:]
    table = (tmp_path / "table.md").read_text()
    rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| zoo/inception")]
    assert [r[1].split(" (= ")[0] for r in rows[:5]] == [
        "tuned", "default", "all texture", "all buffer", "all buffer (again)"]
    assert all(r[-1].startswith("yes") for r in rows[:5])
    assert "Spearman rho" in table and "<!-- bench:tuned.py -->" in table


def test_the_tuned_table_says_which_builds_run_the_same_program(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from texscope.opencl.session import KernelTime

    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import tuned

    programs = {"tuned": "a", "default": "b", "all-texture": "c", "all-buffer": "a"}
    for name, text in programs.items():
        (tmp_path / name).mkdir()
        # The all-buffer build's target has no room for images; its program is the tuned one.
        (tmp_path / name / "plan.json").write_text(json.dumps({"target": name, "steps": []}))
        (tmp_path / name / "kernels.cl").write_text(text)

    def model(milliseconds: dict) -> dict:
        # Three commands; in the tuned build the conv gains, the pad loses.
        rows = {label: {"run": SimpleNamespace(launches=3, images=0, copies=0),
                        "times": (KernelTime("lv1", "pad_kernel", 1e-6 * (2 if label == "tuned"
                                                                         else 1)),
                                  KernelTime("lv2", "conv_kernel", 1e-6 * (5 if label == "tuned"
                                                                          else 9)),
                                  KernelTime("lv3", "add_kernel", 1e-6)),
                        "seconds": value / 1e3, "ok": True, "predicted": value / 1e3,
                        "digest": tuned.program_digest(tmp_path / tuned.folder(
                            "all buffer" if label == tuned.AGAIN else label))}
                for label, value in milliseconds.items()}
        return {"rows": rows, "set_build_s": 1.0, "tune_s": 2.0, "untuned": 0}

    found = {"same": model({"tuned": 1.02, "default": 2.0, "all texture": 3.0,
                            "all buffer": 1.0, tuned.AGAIN: 1.04})}
    (tmp_path / "tuned" / "kernels.cl").write_text("d")
    found["faster"] = model({"tuned": 0.9, "default": 2.0, "all texture": 3.0,
                             "all buffer": 1.0, tuned.AGAIN: 0.99})
    # The tuning kept the default plan: named, and counted by its time.
    (tmp_path / "tuned" / "kernels.cl").write_text("b")
    (tmp_path / "tuned" / "plan.json").write_text(json.dumps({"target": "default", "steps": []}))
    found["as default"] = model({"tuned": 0.8, "default": 0.81, "all texture": 3.0,
                                 "all buffer": 1.0, tuned.AGAIN: 1.025})
    lines = tuned.table(found)
    assert "| same | tuned (= all buffer) | 1.020 | 1.020 | 3 | 0 | 0 | 1.020 | yes |" in lines
    assert "| faster | tuned | 0.900 | 0.900 | 3 | 0 | 0 | 0.900 | yes |" in lines
    assert "| as default | tuned (= default) | 0.800 | 0.800 | 3 | 0 | 0 | 0.800 | yes |" in lines
    assert ("Noise band: `all buffer (again)` against `all buffer`, the same program replayed "
            "as a build of its own: 2.5% apart in the median model, 4.0% at most (same).") in lines
    # Only the model whose tuned program is its own lists the kernels that
    # moved: the conv that gained, then the pad that lost (the add did not move).
    moved = [line for line in lines if line.count(" | ") == 6 and not line.startswith("| model")
             and not line.startswith("|---")]
    assert moved == ["| faster | all buffer | lv2 | conv_kernel | 5.0 | 9.0 | -4.0 |",
                     "| faster | all buffer | lv1 | pad_kernel | 2.0 | 1.0 | +1.0 |",
                     "| as default | all buffer | lv2 | conv_kernel | 5.0 | 9.0 | -4.0 |",
                     "| as default | all buffer | lv1 | pad_kernel | 2.0 | 1.0 | +1.0 |"]
    assert ("Tuned plan against the better extreme: the very same program on 1 models (same); "
            "at most 0.95x on 2 (faster 0.900, as default 0.800); otherwise within 1.00x plus "
            "the noise band on 0 (none); beyond it on 0 (none).") in lines


def test_the_tuned_builds_are_built_for_the_target_the_export_was(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import tuned

    (tmp_path / "meta.json").write_text(json.dumps({"commit": "abc", "target": "nvidia-opencl"}))
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", default="adreno-opencl")
    assert tuned._exported_target(parser, tmp_path, "adreno-opencl") == "nvidia-opencl"
    assert tuned._exported_target(parser, tmp_path, "nvidia-opencl") == "nvidia-opencl"
    done = _bench("tuned.py", "--export-tuned", tmp_path, "--tuning-from", tmp_path,
                  "--target", "mali-opencl", "zoo/inception", check=False)
    assert done.returncode == 2
    assert f"--target mali-opencl: {tmp_path} was exported for nvidia-opencl" in done.stderr


def test_the_tuned_bench_refuses_a_broken_tuning_file_in_one_line(tmp_path):
    """--export-tuned with a tuning file that is not one: the file named,
    exit 2, no traceback, no tuned build written."""
    (tmp_path / "meta.json").write_text(json.dumps({"commit": "abc", "target": "adreno-opencl"}))
    (tmp_path / "zoo_inception").mkdir()
    (tmp_path / "zoo_inception" / "meta.json").write_text(json.dumps({"model": "zoo/inception"}))
    results = tmp_path / "results" / "zoo_inception"
    results.mkdir(parents=True)
    (results / "tuning.json").write_text('{"format": "texscope-tuning", "version": 1}')
    done = _bench("tuned.py", "--export-tuned", tmp_path, "--tuning-from", tmp_path / "results",
                  "zoo/inception", check=False)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert str(results / "tuning.json") in done.stderr.strip().splitlines()[-1]
    assert sorted(p.name for p in (tmp_path / "zoo_inception").iterdir()) == ["meta.json"]


def test_the_tuned_replay_sets_each_build_up_once_in_one_context_unless_asked(tmp_path, monkeypatch,
                                                                             capsys):
    pytest.importorskip("pyopencl")
    from tvm import relax  # pylint: disable=import-outside-toplevel

    import texscope  # pylint: disable=import-outside-toplevel
    from texscope import opencl  # pylint: disable=import-outside-toplevel
    from texscope.opencl import replay as opencl_replay  # pylint: disable=import-outside-toplevel
    from texscope.opencl import session as opencl_session  # pylint: disable=import-outside-toplevel

    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import tuned

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 8, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.nn.relu(x)))
        bb.emit_func_output(out)
    root = tmp_path / "relu"
    labels = ["tuned", "default", "all texture", "all buffer"]
    plan = opencl.plan_of(texscope.build(bb.get(), "adreno-opencl"))
    for label in labels:
        (root / tuned.folder(label)).mkdir(parents=True)
        plan.write(root / tuned.folder(label))
    tuned.write_case(root, bb.get(), [np.linspace(-1, 1, 256, dtype="float32").reshape(1, 4, 8, 8)])
    (root / "meta.json").write_text(json.dumps({
        "model": "relu", "set_build_s": 0.1, "builds": labels,
        "predicted_s": {label: 1e-6 for label in [*labels, tuned.AGAIN]}}))
    (root / "tuning.json").write_text("{}")
    made, contexts = [], []

    class Counted(opencl_session.Session):
        def __init__(self, *args, **kwargs):
            made.append(args[0])
            super().__init__(*args, **kwargs)
            contexts.append(self.queue.context.int_ptr)

    monkeypatch.setattr(opencl_session, "Session", Counted)
    monkeypatch.setattr(opencl_replay, "Session", Counted)
    found = tuned.measure(tmp_path, None, 9)
    assert len(made) == 5  # four builds and the all-buffer one again, each set up once
    assert len(set(contexts)) == 1  # in one OpenCL context
    rows = found["relu"]["rows"]
    assert all(row["ok"] and row["seconds"] > 0 for row in rows.values())
    written = json.loads(json.dumps(tuned.as_json(found)))  # what --json writes
    assert set(written["relu"]) == {*labels, tuned.AGAIN}
    assert all(build["predicted_s"] == 1e-6 and build["ok"]
               and [c[:2] for c in build["commands"]] == [[t.binding, t.kernel]
                                                          for t in rows["tuned"]["times"]]
               for build in written["relu"].values())
    made.clear(), contexts.clear()
    tuned.measure(tmp_path, None, 9, contexts=True)
    assert len(made) == len(set(contexts)) == 5  # a context each
    made.clear()
    tuned.measure(tmp_path, None, 9, one_shot=True)
    assert len(made) == 5 * 10  # a first run to check the outputs, then 9 timed
    # Stopped by a device call's time limit (SIGINT) while setting up the
    # second model: the first one's rows are kept, and the table says so.
    shutil.copytree(root, tmp_path / "second")
    second = json.loads((tmp_path / "second" / "meta.json").read_text())
    (tmp_path / "second" / "meta.json").write_text(json.dumps({**second, "model": "second"}))

    class Interrupted(Counted):
        def __init__(self, *args, **kwargs):
            if len(made) == 5:
                raise KeyboardInterrupt
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(opencl_session, "Session", Interrupted)
    made.clear()
    found = tuned.measure(tmp_path, None, 9)
    assert list(found) == ["relu"] and len(made) == 5
    assert "interrupted: the table holds the 1 models measured before" in capsys.readouterr().out


def test_the_tuned_bench_exports_a_second_round(tmp_path):
    """--export with --tuning-from: each model's set also runs the plan its
    earlier tuning file chooses; an earlier file that is not one is refused
    in one line, exit 2."""
    pytest.importorskip("pyopencl")
    _bench("tuned.py", "--export", tmp_path / "first", "zoo/inception")
    set_dir = tmp_path / "first" / "zoo_inception" / "set"
    subprocess.run([sys.executable, "-m", "texscope.opencl.tune", str(set_dir), "-o",
                    str(tmp_path / "first" / "zoo_inception" / "tuning.json"), "--repeats", "1"],
                   check=True, capture_output=True, cwd=ROOT, timeout=600)
    _bench("tuned.py", "--export", tmp_path / "second", "--tuning-from", tmp_path / "first",
           "zoo/inception")
    second = json.loads((tmp_path / "second" / "zoo_inception" / "set" /
                         "tuning-set.json").read_text())
    assert second["in_place"]["programs"]["previous"] == "in-place/previous"
    assert second["previous_tuning"] == json.loads(
        (tmp_path / "first" / "zoo_inception" / "tuning.json").read_text())
    assert (tmp_path / "second" / "zoo_inception" / "set" / "in-place" / "previous" /
            "plan.json").is_file()
    (tmp_path / "first" / "zoo_inception" / "tuning.json").write_text("{}")
    done = _bench("tuned.py", "--export", tmp_path / "third", "--tuning-from",
                  tmp_path / "first", "zoo/inception", check=False)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "not a texscope tuning file" in done.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "third").exists()


def test_the_whole_program_protocols_time_each_program_five_ways_on_pocl(tmp_path):
    """An export of tuned.py without a tuned build: both extremes timed by
    every protocol, the tuned column empty, the ratio the columns' ratio."""
    pytest.importorskip("pyopencl")
    out = tmp_path / "out"
    bench = [sys.executable, str(ROOT / "bench" / "tuned.py"), "--export", str(out), "zoo/inception"]
    assert subprocess.run(bench, capture_output=True, text=True, cwd=ROOT,
                          timeout=600).returncode == 0
    env = {**os.environ, "TEXSCOPE_BENCHMARKS_MD": str(tmp_path / "table.md")}
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "whole_protocols.py"), str(out),
                           "--runs", "3", "--markdown"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    table = (tmp_path / "table.md").read_text()
    rows = [[cell.strip() for cell in line.strip("|").split("|")]
            for line in table.splitlines() if line.startswith("| zoo_inception")]
    assert [r[1] for r in rows] == ["alone", "turns", "back to back", "alone again", "tuner"]
    for _, _, buffer, texture, tuned, ratio in rows:
        assert float(buffer) > 0 and float(texture) > 0 and tuned == "-"
        assert float(ratio) == pytest.approx(float(texture) / float(buffer), rel=2e-3)
    assert "<!-- bench:whole_protocols.py -->" in table


def test_the_whole_program_protocols_refuse_a_folder_that_is_no_export(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "whole_protocols.py"),
                           str(tmp_path), "zoo/resnet"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"whole_protocols.py: error: {tmp_path / 'zoo_resnet'}: not a model of a "
        "bench/tuned.py export")
    empty = subprocess.run([sys.executable, str(ROOT / "bench" / "whole_protocols.py"),
                            str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert empty.returncode == 2 and empty.stdout == ""
    assert empty.stderr.strip().splitlines()[-1] == (
        f"whole_protocols.py: error: {tmp_path}: holds no model of a bench/tuned.py export")
