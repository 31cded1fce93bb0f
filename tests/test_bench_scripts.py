"""The bench scripts, run as a user runs them: a name none of them knows is
a usage error (exit status 2, one line saying which), never a traceback or
an empty table."""

import subprocess
import sys
from pathlib import Path

import pytest

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


def test_opencl_run_refuses_a_replay_of_a_missing_folder(tmp_path):
    missing = tmp_path / "not_exported"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "opencl_run.py"), "--replay",
                           str(missing)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr and done.stdout == ""
    assert done.stderr.strip().splitlines()[-1].endswith("no such folder (opencl_run.py --export "
                                                          "writes one)")
    assert not missing.exists()


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


@pytest.mark.real_models  # heavy (four processes, PoCL timing): run with -m real_models
def test_the_tuned_bench_runs_its_four_steps_on_pocl(tmp_path):
    pytest.importorskip("pyopencl")
    bench = [sys.executable, str(ROOT / "bench" / "tuned.py")]
    out = tmp_path / "out"
    steps = [["--export", str(out), "zoo/inception"], ["--tune", str(out), "--repeats", "1"],
             ["--export-tuned", str(out), "--tuning-from", str(out), "zoo/inception"],
             ["--replay", str(out), "--markdown", str(tmp_path / "table.md")]]
    for step in steps:
        done = subprocess.run(bench + step, capture_output=True, text=True, cwd=ROOT, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
    table = (tmp_path / "table.md").read_text()
    rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| zoo/inception")]
    assert [r[1] for r in rows[:5]] == ["tuned", "default", "all texture", "all buffer",
                                        "all buffer (again)"]
    assert all(r[-1].startswith("yes") for r in rows[:5])
    assert "Spearman rho" in table
