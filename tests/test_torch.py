"""PyTorch models: ``texscope.from_torch``, ``.pt2`` files through the
command, and torchvision's mobile classifiers built for Adreno and Mali and
run on OpenCL (PoCL in CI) against PyTorch's own eager outputs.

The default run builds squeezenet1_1 at 64 x 64 for Adreno; ``-m real_models``
builds all six models at 224 x 224 for both targets.
"""

import json
import subprocess
import sys

import numpy as np
import pytest
import tvm
from tvm.script import ir as I, relax as R

import texscope
from texscope import opencl
from texscope.cli import main
from texscope.errors import TexscopeError

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from texscope.models.torch_zoo import TORCHVISION_MODELS, torchvision_model  # noqa: E402
from test_real_models import _convs_reading_means  # noqa: E402


class Named(torch.nn.Module):
    def forward(self, image, shift):
        return {"scores": torch.relu(image + shift), "total": image.mean((2, 3))}


class Single(torch.nn.Module):
    def forward(self, image):
        return torch.sigmoid(image)


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Conv2d(8, 4, 1)

    def forward(self, photo):
        return torch.relu(self.head(torch.relu(self.conv(photo))))


class Determinant(torch.nn.Module):
    def forward(self, x):
        return torch.linalg.det(x)


def test_from_torch_keeps_the_argument_names_and_a_returned_dicts_keys():
    @I.ir_module
    class Expected:
        @R.function
        def main(image: R.Tensor((1, 4, 8, 8), "float32"), shift: R.Tensor((1, 4, 1, 1), "float32")):
            with R.dataflow():
                lv = R.add(image, shift)
                scores = R.nn.relu(lv)
                total = R.mean(image, axis=[2, 3], keepdims=False)
                gv = scores, total
                R.output(gv)
            return gv

    mod = texscope.from_torch(Named(), (torch.randn(1, 4, 8, 8), torch.randn(1, 4, 1, 1)))
    tvm.ir.assert_structural_equal(mod, Expected)
    # Structural equality ignores names; the printed text has them.
    assert mod.script() == Expected.script()


def test_a_single_output_is_a_tensor_named_as_torch_export_names_it():
    @I.ir_module
    class Expected:
        @R.function
        def main(image: R.Tensor((1, 4, 8, 8), "float32")):
            with R.dataflow():
                sigmoid = R.sigmoid(image)
                R.output(sigmoid)
            return sigmoid

    mod = texscope.from_torch(Single(), torch.randn(1, 4, 8, 8))
    tvm.ir.assert_structural_equal(mod, Expected)
    assert mod.script() == Expected.script()


def test_an_operator_the_frontend_lacks_is_one_line_naming_it():
    with pytest.raises(TexscopeError) as err:
        texscope.from_torch(Determinant(), (torch.randn(3, 3),))
    assert str(err.value) == ("Determinant: TVM's PyTorch frontend has no converter for "
                              "_linalg_det.default")


def _check_on_opencl(module, size: int, target: str, rtol=1e-3):
    """Build ``module`` for ``target``, run it on OpenCL, compare with eager
    PyTorch; the build's figures and the largest error, for the report."""
    image = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = module(image).numpy()
    mod = texscope.from_torch(module, (image,))
    result = texscope.build(mod, opencl.device_target(None, target))
    figures = result.report.build
    mean_fed = _convs_reading_means(result.report)
    assert figures["convs"] > 0 and figures["copies_left"] == 0
    assert figures["convs_reading_texture"] == figures["convs"] - mean_fed
    run = opencl.run(result, {"x": image.numpy()})
    assert run.copies == 0 and run.images > 0
    (actual,) = run.outputs
    # The scale-keeping weights give logits of order one: a wrong kernel
    # moves them by that much, float32 sums in another order by 1e-6.
    scale = float(np.abs(expected).max())
    assert 0.25 < scale < 10
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=1e-4 * scale)
    error = float(np.abs(actual - expected).max())
    print(f"convs {figures['convs']}, reading textures {figures['convs_reading_texture']}, "
          f"fed by means {mean_fed}, copies {run.copies}, largest error {error:.3g} "
          f"(largest logit {scale:.3g})")
    return figures, mean_fed, error


def test_squeezenet_builds_packs_every_conv_and_matches_eager_pytorch_on_opencl():
    figures, mean_fed, _ = _check_on_opencl(torchvision_model("squeezenet1_1", size=64), 64,
                                             "adreno-opencl")
    assert (figures["convs"], figures["convs_reading_texture"], mean_fed) == (26, 26, 0)


@pytest.mark.real_models
@pytest.mark.parametrize("target", ["adreno-opencl", "mali-opencl"])
@pytest.mark.parametrize("name", TORCHVISION_MODELS)
def test_a_torchvision_model_builds_runs_and_matches_eager_pytorch(name, target):
    _check_on_opencl(torchvision_model(name, size=224), 224, target)


def test_the_drawn_weights_are_the_same_for_the_same_seed():
    first, second = (torchvision_model("mobilenet_v3_small", size=32) for _ in range(2))
    image = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(first(image), second(image))


def test_scale_keeping_weights_give_logits_of_order_one():
    with torch.no_grad():
        logits = torchvision_model("squeezenet1_1")(torch.randn(2, 3, 64, 64))
    assert 0.1 < float(logits.std()) < 10
    assert torchvision_model("squeezenet1_1").classifier[1].weight.std().item() == pytest.approx(
        (2 / 512) ** 0.5, rel=0.05)


def _texscope(*args, cwd):
    return subprocess.run([sys.executable, "-m", "texscope", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, check=False)


@pytest.fixture(scope="module")
def saved_program(tmp_path_factory):
    path = tmp_path_factory.mktemp("pt2") / "convnet.pt2"
    torch.manual_seed(0)
    program = torch.export.export(ConvNet().eval(), (torch.randn(1, 3, 16, 16),))
    torch.export.save(program, str(path))
    return path


def test_the_command_builds_a_pt2_file_with_its_names(saved_program, tmp_path):
    done = _texscope("build", saved_program, "--target", "mali-opencl", "-o", tmp_path / "out",
                     cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "copies: 0 planned (0 bytes), 0 left after fusion" in done.stdout
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert (plan["inputs"], plan["outputs"]) == (["photo"], ["relu_1"])


def test_the_command_runs_a_pt2_file_against_pytorch(saved_program, tmp_path):
    done = _texscope("run", saved_program, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 copies" in done.stdout
    assert "outputs: relu_1\n" in done.stdout
    (against,) = [line for line in done.stdout.splitlines() if "PyTorch (eager)" in line]
    assert against.startswith("against PyTorch (eager): max abs error ") and \
        against.endswith("-> OK")


def test_explain_reads_a_pt2_file(saved_program, capsys):
    assert main(["explain", str(saved_program), "--tensor", "photo"]) == 0
    assert "photo" in capsys.readouterr().out


def test_a_broken_pt2_file_is_one_line_exit_2_nothing_written(tmp_path):
    broken = tmp_path / "broken.pt2"
    broken.write_bytes(b"PK\x03\x04 cut short")
    done = _texscope("build", broken, "-o", tmp_path / "out", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (f"texscope: error: {broken}: not a readable torch.export program "
                           "(BadZipFile: File is not a zip file)\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.pt2"]


@pytest.mark.parametrize("content", [b"", b"not a zip file at all"])
@pytest.mark.parametrize("command", ["run", "explain"])
def test_run_and_explain_refuse_a_broken_pt2_file_in_one_line(tmp_path, capsys, command, content):
    broken = tmp_path / "broken.pt2"
    broken.write_bytes(content)
    assert main([command, str(broken)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"texscope: error: {broken}: not a readable torch.export "
                                   "program (") and captured.err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.pt2"]


def test_a_pt2_file_with_an_operator_the_frontend_lacks_is_one_line(tmp_path, capsys):
    model = tmp_path / "det.pt2"
    torch.export.save(torch.export.export(Determinant(), (torch.randn(3, 3),)), str(model))
    assert main(["build", str(model), "-o", str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"texscope: error: {model}: TVM's PyTorch frontend has no converter "
                            "for _linalg_det.default\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["det.pt2"]
