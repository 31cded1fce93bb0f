"""The names users gave: a model's inputs and outputs keep them through the
import, the build, ``plan.json``, the replay's ``.npz`` files, ``texscope
run`` and the reports (not the frontends' ``gv``, ``lv41``...)."""

import json
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from texscope.frontend.model_file import load_model
from texscope.frontend.tflite_model import load_tflite

from modules import tiny_tflite


def _texscope(*args):
    return subprocess.run([sys.executable, "-m", "texscope", *map(str, args)],
                          capture_output=True, text=True, check=False)


def _returned(mod) -> list[str]:
    body = mod["main"].body
    bound = {b.var.name: b.value for block in body.blocks for b in block.bindings}
    returned = bound.get(body.body.name, body.body)
    return [field.name for field in getattr(returned, "fields", [body.body])]


def classifier_onnx(path):
    """A conv, a global pool and a dense layer: ``image`` in, ``logits`` and
    ``features`` out."""
    rng = np.random.default_rng(0)
    weight = (rng.standard_normal((8, 3, 3, 3)) / np.sqrt(27)).astype("float32")
    dense = (rng.standard_normal((8, 5)) / np.sqrt(8)).astype("float32")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["image", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["features"]),
         helper.make_node("GlobalAveragePool", ["features"], ["pooled"]),
         helper.make_node("Flatten", ["pooled"], ["flat"]),
         helper.make_node("MatMul", ["flat", "d"], ["scores"]),
         # Fused with the MatMul: the fused call is bound to a fresh variable.
         helper.make_node("Add", ["scores", "bias"], ["logits"])],
        "classifier",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 5]),
         helper.make_tensor_value_info("features", TensorProto.FLOAT, [1, 8, 16, 16])],
        initializer=[numpy_helper.from_array(weight, "w"), numpy_helper.from_array(dense, "d"),
                     numpy_helper.from_array(np.full((5,), 0.5, "float32"), "bias")],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def test_a_tflite_model_returns_its_outputs_by_their_names(mediapipe):
    mod = load_tflite(mediapipe["face_detection_short_range"])
    assert [p.name for p in mod["main"].params] == ["input"]
    assert _returned(mod) == ["regressors", "classificators"]


def test_an_onnx_model_returns_its_outputs_by_their_names(tmp_path):
    classifier_onnx(tmp_path / "classifier.onnx")
    mod = load_model(str(tmp_path / "classifier.onnx"))
    assert [p.name for p in mod["main"].params] == ["image"]
    assert _returned(mod) == ["logits", "features"]


def test_names_go_through_the_build_plan_replay_run_and_reports(tmp_path):
    model = tmp_path / "classifier.onnx"
    classifier_onnx(model)
    done = _texscope("build", model, "-o", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert (plan["inputs"], plan["outputs"]) == (["image"], ["logits", "features"])
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert {"image", "logits", "features"} <= {t["name"] for t in report["tensors"]}
    assert "gv" not in (tmp_path / "out" / "report.md").read_text().split()

    # The replay reads inputs and expected outputs by the model's names, and
    # saves its outputs under them.
    rng = np.random.default_rng(3)
    image = rng.standard_normal((1, 3, 16, 16)).astype("float32")
    np.savez(tmp_path / "inputs.npz", image=image)
    first = subprocess.run(
        [sys.executable, "-m", "texscope.opencl.replay", tmp_path / "out",
         "--inputs", tmp_path / "inputs.npz", "--save-outputs", tmp_path / "outputs.npz"],
        capture_output=True, text=True, check=False)
    assert first.returncode == 0, first.stderr
    with np.load(tmp_path / "outputs.npz") as saved:
        assert sorted(saved.files) == ["features", "logits"]
        features = saved["features"]
        logits = saved["logits"]
    # Against numpy's own forward pass, the expected file keyed by name and
    # written in the other order.
    w = numpy_helper.to_array(onnx.load(str(model)).graph.initializer[0])
    d = numpy_helper.to_array(onnx.load(str(model)).graph.initializer[1])
    padded = np.pad(image, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    expected_features = np.maximum(np.einsum("nchwij,ocij->nohw", windows, w), 0)
    expected_logits = expected_features.mean(axis=(2, 3)) @ d + 0.5
    np.testing.assert_allclose(features, expected_features, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(logits, expected_logits, rtol=1e-4, atol=1e-5)
    np.savez(tmp_path / "expected.npz", features=expected_features, logits=expected_logits)
    again = subprocess.run(
        [sys.executable, "-m", "texscope.opencl.replay", tmp_path / "out",
         "--inputs", tmp_path / "inputs.npz", "--expected", tmp_path / "expected.npz"],
        capture_output=True, text=True, check=False)
    assert again.returncode == 0, again.stderr
    assert "-> OK" in again.stdout

    ran = _texscope("run", model)
    assert ran.returncode == 0, ran.stderr
    assert "outputs: logits, features\n" in ran.stdout


def test_a_tflite_files_names_reach_the_plan(tmp_path):
    model = tmp_path / "relu.tflite"
    model.write_bytes(tiny_tflite.relu())
    done = _texscope("build", model, "-o", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert (plan["inputs"], plan["outputs"]) == (["x"], ["y"])


def test_onnx_names_that_are_not_identifiers_are_kept(tmp_path):
    """TVM's importer makes ``input_1`` of ``input.1``; the plan and the
    replay's files use the model's ``input.1`` and ``output:0``."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["input.1"], ["output:0"])], "odd",
        [helper.make_tensor_value_info("input.1", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("output:0", TensorProto.FLOAT, [1, 8])])
    model = tmp_path / "odd.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), model)
    done = _texscope("build", model, "-o", tmp_path / "out")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert (plan["inputs"], plan["outputs"]) == (["input.1"], ["output:0"])
    values = np.linspace(-1, 1, 8, dtype="float32").reshape(1, 8)
    np.savez(tmp_path / "inputs.npz", **{"input.1": values})
    np.savez(tmp_path / "expected.npz", **{"output:0": np.maximum(values, 0)})
    replayed = subprocess.run(
        [sys.executable, "-m", "texscope.opencl.replay", tmp_path / "out", "--inputs",
         tmp_path / "inputs.npz", "--expected", tmp_path / "expected.npz"],
        capture_output=True, text=True, check=False)
    assert replayed.returncode == 0, replayed.stderr
    assert "-> OK" in replayed.stdout
