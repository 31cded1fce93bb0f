"""The smaller things a new user met (issue 49), each through the installed
``texscope`` command or ``python -m texscope.opencl.replay``, as a user runs
them."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from texscope import opencl
from texscope.knowledge.targets import texture_target

REPO = Path(__file__).resolve().parent.parent
SMALL = REPO / "tests" / "modules" / "adreno_small.py"


def run(*args, cwd=None, env=None):
    return subprocess.run([*map(str, args)], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=600)


def texscope(*args, **kwargs):
    return run("texscope", *args, **kwargs)


def replay(*args, **kwargs):
    return run(sys.executable, "-m", "texscope.opencl.replay", *args, **kwargs)


def one_error_line(done, starts: str) -> str:
    assert done.returncode == 2, (done.stdout, done.stderr)
    (line,) = done.stderr.splitlines()
    assert line.startswith("texscope: error: " + starts), line
    return line


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """ConvFma of adreno_small.py built by the command."""
    out = tmp_path_factory.mktemp("built") / "out"
    done = texscope("build", SMALL, "--module", "ConvFma", "-o", out)
    assert done.returncode == 0, done.stderr
    return out


def test_explain_reads_a_build_directory(built, tmp_path):
    from_dir = texscope("explain", built, "--tensor", "c")
    from_file = texscope("explain", SMALL, "--module", "ConvFma", "--tensor", "c")
    assert from_dir.returncode == 0, from_dir.stderr
    assert from_dir.stdout == from_file.stdout and "c_multiply" in from_dir.stdout
    (tmp_path / "mine").mkdir()
    one_error_line(texscope("explain", tmp_path / "mine"),
                   f"{tmp_path / 'mine'} is a directory but no build's")


def test_reports_are_titled_by_the_model(built):
    assert (built / "report.md").read_text().startswith(
        "# texscope report: adreno_small.py (ConvFma) for adreno-opencl\n")
    assert "<title>texscope report: adreno_small.py (ConvFma) for adreno-opencl</title>" in \
        (built / "report.html").read_text()
    assert json.loads((built / "report.json").read_text())["summary"]["model"] == \
        "adreno_small.py (ConvFma)"


def test_the_demo_writes_into_the_current_directory_and_says_where(tmp_path):
    before = set(Path("/tmp").glob("texscope-demo-*"))
    done = texscope("demo", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"written to {tmp_path / 'texscope-demo'}: " in done.stdout
    assert (tmp_path / "texscope-demo" / "report.html").exists()
    assert set(Path("/tmp").glob("texscope-demo-*")) == before


def test_ops_fits_the_terminal():
    done = texscope("ops", env=dict(os.environ, COLUMNS="80"))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(map(len, lines)) <= 80
    assert "conv2d_nchw4c" in lines and any("relax.nn.conv2d(data_layout=NCHW4c" in line
                                            for line in lines)


def test_replay_into_a_closed_pipe_is_quiet(built):
    # `python -m texscope.opencl.replay out | head -0`: the reader is gone.
    proc = subprocess.Popen([sys.executable, "-m", "texscope.opencl.replay", str(built)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    _, err = proc.communicate(timeout=300)
    assert err == b"" and proc.returncode == 1


def test_calibrate_keeps_a_file_it_did_not_write(tmp_path):
    mine = tmp_path / "p.json"
    mine.write_text('{"my": "notes"}\n')
    one_error_line(texscope("calibrate", "-o", mine),
                   f"{mine} exists and is not a texscope cost profile; not overwriting it "
                   "(--force overwrites it)")
    assert mine.read_text() == '{"my": "notes"}\n'
    done = texscope("calibrate", "--shapes", "8x8", "--repeats", "1", "-o", mine, "--force")
    assert done.returncode == 0, done.stderr
    assert json.loads(mine.read_text())["format"] != "my"


def wide_model(path: Path, width: int) -> Path:
    path.write_text(
        "from tvm.script import ir as I, relax as R\n\n@I.ir_module\nclass Wide:\n"
        "    @R.function\n"
        f"    def main(x: R.Tensor((1, 8, 1, {width}), 'float32'),\n"
        "             w: R.Tensor((8, 8, 1, 3), 'float32')):\n"
        "        with R.dataflow():\n"
        "            c = R.nn.conv2d(x, w, padding=(0, 1))\n"
        "            y = R.nn.conv2d(c, w, padding=(0, 1))\n"
        "            R.output(y)\n"
        "        return y\n")
    return path


def test_an_image_over_the_device_names_a_target_and_build_fits_the_device(tmp_path):
    # Mali's images reach 65536 texels: wider than any PoCL's, whatever it reports.
    width = opencl.default_device().image2d_max_width
    model = wide_model(tmp_path / "wide.py", width + 64)
    assert texscope("build", model, "--target", "mali-opencl", "-o", tmp_path / "a").returncode == 0
    done = replay(tmp_path / "a")
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert "--fit-device" in line and "--target '" in line
    pasted = line.split("--target '")[1].rstrip("'")
    texture = texture_target(pasted)
    assert (texture.spatial_limit, texture.target.attrs["device"]) == (width, "mali")
    assert texscope("build", model, "--target", pasted, "-o", tmp_path / "b").returncode == 0
    done = texscope("build", model, "--target", "mali-opencl", "--fit-device", "-o", tmp_path / "c")
    assert done.returncode == 0 and f"texture limits {width} x" in done.stdout
    for out in ("b", "c"):
        done = replay(tmp_path / out)
        assert done.returncode == 0, done.stderr


# Makes ``import tflite`` fail, as after a plain install.
NO_TFLITE = """import sys

class _NoTflite:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "tflite" or name.startswith("tflite."):
            raise ModuleNotFoundError("No module named 'tflite'", name="tflite")
        return None

sys.meta_path.insert(0, _NoTflite)
"""


def test_install_hints_name_what_pip_can_install(tmp_path):
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(NO_TFLITE)
    model = tmp_path / "m.tflite"
    model.write_bytes(b"\x1c\x00\x00\x00TFL3" + bytes(64))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(tmp_path / "site"), str(REPO), os.environ.get("PYTHONPATH", "")]))
    one_error_line(texscope("build", model, "-o", tmp_path / "out", env=env),
                   "TFLite models need the tflite package: pip install tflite")
    # texscope is not on PyPI: no hint may name its extras.
    sources = "".join(p.read_text() for p in (REPO / "texscope").rglob("*.py"))
    assert "pip install 'texscope[" not in sources
    assert 'opencl = ["pyopencl"]' in (REPO / "pyproject.toml").read_text()


def test_run_takes_inputs_from_a_file_and_saves_its_outputs(tmp_path):
    rng = np.random.default_rng(1)
    x, s, t = (rng.uniform(-1, 1, (1, 8, 6, 6)).astype("float32") for _ in range(3))
    w = np.zeros((8, 8, 3, 3), "float32")  # the conv gives 0: the output is exactly t
    np.savez(tmp_path / "in.npz", x=x, w=w, s=s, t=t)
    out = tmp_path / "out.npz"
    done = texscope("run", SMALL, "--module", "ConvFma", "--inputs", tmp_path / "in.npz",
                    "--save-outputs", out)
    assert done.returncode == 0, done.stderr
    assert f"outputs written to {out} (f)" in done.stdout
    with np.load(out) as saved:
        np.testing.assert_array_equal(saved["f"], t)
    one_error_line(texscope("run", SMALL, "--module", "ConvFma", "--save-outputs", out),
                   f"{out} exists; --save-outputs writes only new files")
    np.savez(tmp_path / "bad.npz", x=x[0], w=w, s=s, t=t)
    one_error_line(texscope("run", SMALL, "--module", "ConvFma", "--inputs", tmp_path / "bad.npz"),
                   f"{tmp_path / 'bad.npz'}: input x is a 3-D float32 array; main takes a 4-D")


def test_a_cuda_target_is_one_line():
    done = texscope("run", SMALL, "--module", "ConvFma", "--target", "cuda")
    one_error_line(done, "target cuda with keys ['cuda', 'gpu'] has no GPU texture support")
