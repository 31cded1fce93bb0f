"""The texscope command."""

import subprocess
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from texscope.cli import main

RULES = str(Path(__file__).parent / "modules" / "rules.py")


def test_build_a_tvmscript_file(tmp_path, capsys):
    assert main(["build", RULES, "--module", "Residual", "-o", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "tensors: " in printed and "convert_layout" in printed and "codegen" in printed
    assert {p.name for p in tmp_path.iterdir()} == {".texscope-manifest.json",
        "kernels.cl", "model.so", "plan.json", "report.html", "report.json", "report.md",
        "report.svg"}


def test_build_on_the_threads_asked_for(tmp_path, capsys):
    assert main(["build", RULES, "--module", "Residual", "-o", str(tmp_path / "a"), "-j", "2"]) == 0
    assert "(2 threads scheduling and lowering kernels)" in capsys.readouterr().out
    assert main(["build", RULES, "--module", "Residual", "-o", str(tmp_path / "b"), "-j", "0"]) == 2
    assert capsys.readouterr().err.strip() == (
        "texscope: error: --jobs 0: expected a whole number of threads, 1 or more")
    assert not (tmp_path / "b").exists()


def conv_relu_onnx(path):
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype("float32"), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"])],
        "conv_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])],
        initializer=[weight],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def test_build_an_onnx_file(tmp_path, capsys):
    model = tmp_path / "conv_relu.onnx"
    conv_relu_onnx(model)
    assert main(["build", str(model), "--target", "adreno-opencl", "-o", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert "1 reading or writing images" in printed or "reading or writing images" in printed
    assert "__read_only image2d_array_t" in (tmp_path / "out" / "kernels.cl").read_text()


def test_vulkan_build_writes_the_report_and_explains(tmp_path, capsys):
    assert main(["build", RULES, "--module", "Conflict", "--target", "adreno-vulkan",
                 "-o", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "no vulkan code generator" in printed
    assert (tmp_path / "report.md").exists()


def test_bad_input_is_an_error_not_a_traceback(tmp_path, capsys):
    assert main(["build", RULES, "-o", str(tmp_path)]) == 2  # several modules, none chosen
    assert "pick one with --module" in capsys.readouterr().err
    assert main(["build", RULES, "--module", "Seed", "--target", "llvm", "-o", str(tmp_path)]) == 2
    assert "no GPU texture support" in capsys.readouterr().err


def test_ops_lists_the_registry(capsys):
    assert main(["ops"]) == 0
    printed = capsys.readouterr().out
    assert "conv2d_nchw4c" in printed and "relax.nn.conv2d(data_layout=NCHW4c" in printed


def test_the_installed_command_runs_the_demo(tmp_path):
    done = subprocess.run(["texscope", "demo", "-o", str(tmp_path)], capture_output=True,
                          text=True, check=True)
    assert "kernels:" in done.stdout and (tmp_path / "kernels.cl").exists()
    assert (tmp_path / "model.py").exists() and (tmp_path / "report.html").exists()
