"""What a new user meets, driven through the installed ``texscope`` command.

Each case runs the console script in a fresh process, as a user would, and
checks the exact message, the exit status and the files.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_cli import conv_relu_onnx

REPO = Path(__file__).resolve().parent.parent
RULES = str(REPO / "tests" / "modules" / "rules.py")


def texscope(*args, extra_path=(), cwd=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*map(str, extra_path), str(REPO),
                                         env.get("PYTHONPATH", "")])
    return subprocess.run(["texscope", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=600)


def _module(body: str, params: str = 'x: R.Tensor((1, 8, 16, 16), "float32")') -> str:
    return ("from tvm.script import ir as I, relax as R\n\n@I.ir_module\nclass Model:\n"
            f"    @R.function\n    def main({params}):\n        with R.dataflow():\n"
            f"            {body}\n            R.output(y)\n        return y\n")


def _printed_without_imports() -> str:
    sys.path.insert(0, str(REPO))
    from texscope.models import zoo  # pylint: disable=import-outside-toplevel

    return zoo.resnet_style(blocks=1).script(show_meta=False)


# (file name, contents or None for none, the error after "texscope: error: ",
# with {file} for the file's path)
BAD_MODELS = [
    ("unknown_op.py", _module("y = R.nn.frobnicate(x)"),
     "{file}:8: TVMScript error: module 'tvm.relax.op.nn' has no attribute 'frobnicate'"),
    ("undefined.py", _module("y = R.nn.relu(z)"),
     "{file}:8: TVMScript error: Undefined variable: z"),
    ("shapes.py", _module("y = R.nn.conv2d(x, w)", 'x: R.Tensor((1, 8, 16, 16), "float32"), '
                          'w: R.Tensor((8, 4, 3, 3), "float32")'),
     "{file}:8: TVMScript error: The channel size of the data should equal to the product of "
     "input channel size of the weight and the number of groups. However, the data channel "
     "size is T.int64(8) while the weight input channel size and number of groups are "
     "T.int64(4) and 1"),
    ("syntax.py", "from tvm.script import relax as R\n\ndef main(x:\n    return x\n",
     "{file}:3: Python syntax error: "),
    ("printed.py", _printed_without_imports(),
     "{file}:4: NameError: name 'I' is not defined (a module printed by mod.script() has its "
     "imports commented out; add `from tvm.script import ir as I, relax as R, tirx as T` "
     "at the top)"),
    ("raises.py", "import math\n\nscale = 1 / 0\n", "{file}:3: ZeroDivisionError: division by zero"),
    ("imports.py", "import not_a_module_texscope_knows\n",
     "{file}:1: ModuleNotFoundError: No module named 'not_a_module_texscope_knows'"),
    ("empty.py", "x = 1\n",
     "{file} defines no IRModule; texscope builds a module-level IRModule, such as a class "
     "decorated with @I.ir_module, or an .onnx file"),
    ("model.txt", "hello\n",
     "{file}: unknown model format '.txt'; give a .py file defining a TVMScript IRModule, "
     "an .onnx file, a .tflite file or a .pt2 file (torch.export.save)"),
    ("garbage.onnx", "not protobuf at all\n", "{file}: not a readable ONNX model ("),
    ("missing.py", None, "no such model file: {file}"),
    ("no_shape.py", _module("y = R.nn.relu(x)", 'x: R.Tensor(ndim=4, dtype="float32")'),
     "{file}: main's input 'x' has a rank (4) but no shape; give it with --input-shape "
     "x=D0,D1,D2,D3"),
]


def _one_error_line(done, expected: str) -> None:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("texscope: error: " + expected), lines[0]
    assert "TVM_BACKTRACE" not in done.stderr and "BlockBuilder" not in done.stderr
    assert "Traceback" not in done.stderr + done.stdout


@pytest.mark.parametrize("name, text, expected", BAD_MODELS, ids=[c[0] for c in BAD_MODELS])
def test_a_bad_model_file_is_one_line_naming_it(tmp_path, name, text, expected):
    model = tmp_path / name
    if text is not None:
        model.write_text(text)
    out = tmp_path / "out"
    _one_error_line(texscope("build", model, "-o", out), expected.format(file=model))
    assert not out.exists()


def test_other_user_mistakes_are_one_line(tmp_path):
    model = tmp_path / "model.py"
    model.write_text(_module("y = R.nn.relu(x)"))
    afile = tmp_path / "afile"
    afile.write_text("mine\n")
    _one_error_line(texscope("build", model, "-o", afile),
                    f"output {afile} exists and is not a directory; name a directory")
    assert afile.read_text() == "mine\n"
    _one_error_line(texscope("build", RULES, "--module", "Nope", "-o", tmp_path / "o"),
                    f"{RULES} defines no IRModule named 'Nope' (it defines: ")
    _one_error_line(texscope("build", model, "--target", "adreno-foo", "-o", tmp_path / "o"),
                    "unknown target 'adreno-foo' (Target kind \"adreno-foo\" is not defined. Target "
                    "creation from string failed: adreno-foo); use a preset (adreno-opencl, "
                    "adreno-vulkan, mali-opencl, nvidia-opencl), a TVM tag such as 'qcom/adreno-opencl-texture', "
                    "or target JSON")
    _one_error_line(texscope("build", tmp_path, "-o", tmp_path / "o"),
                    f"{tmp_path} is not a file; give a .py file defining a TVMScript IRModule, "
                    "an .onnx file, a .tflite file or a .pt2 file (torch.export.save)")
    _one_error_line(texscope("explain", model, "--svg", tmp_path / "nowhere" / "g.svg"),
                    f"cannot write the graph to {tmp_path / 'nowhere' / 'g.svg'}: name a file in "
                    "an existing directory")
    assert not (tmp_path / "o").exists() and not (tmp_path / "nowhere").exists()


def test_output_directories_of_the_user_are_refused_unless_forced(tmp_path):
    model = tmp_path / "model.py"
    model.write_text(_module("y = R.nn.relu(x)"))
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").write_text("my notes\n")
    (out / "todo.txt").write_text("mine\n")
    _one_error_line(texscope("build", model, "-o", out),
                    f"output directory {out} is not empty and texscope did not write it; name a "
                    "new or empty directory, or pass --force to write into it anyway")
    _one_error_line(texscope("demo", "-o", out),
                    f"output directory {out} is not empty and texscope did not write it; name a "
                    "new or empty directory, or pass --force to write into it anyway")
    assert (out / "report.md").read_text() == "my notes\n"
    done = texscope("build", model, "-o", out, "--force")
    assert done.returncode == 0, done.stderr
    assert f"written to {out}: kernels.cl, model.so, plan.json, report.html, report.json, report.md, " \
           "report.svg\n" in done.stdout
    assert (out / "todo.txt").read_text() == "mine\n"
    # Its own directory texscope writes again without --force; the user's file stays.
    done = texscope("build", model, "--target", "adreno-vulkan", "-o", out)
    assert done.returncode == 0, done.stderr
    assert f"written to {out}: report.html, report.json, report.md, report.svg\n" in done.stdout
    assert sorted(p.name for p in out.iterdir()) == [
        ".texscope-manifest.json", "report.html", "report.json", "report.md", "report.svg",
        "todo.txt"]
    assert json.loads((out / ".texscope-manifest.json").read_text())["files"] == [
        "report.html", "report.json", "report.md", "report.svg"]


def test_the_demo_lists_what_it_wrote_and_points_at_the_report(tmp_path):
    out = tmp_path / "demo"
    done = texscope("demo", "-o", out)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert f"written to {out}: kernels.cl, model.py, model.so, plan.json, report.html, report.json, " \
           "report.md, report.svg\n" in done.stdout
    assert done.stdout.endswith(
        f"open {out / 'report.html'} in a browser: every tensor's scope and why, and the graph\n"
        f"explain it: texscope explain {out / 'model.py'} --tensor lv3 --svg graph.svg\n")
    report = json.loads((out / "report.json").read_text())
    names = [t["name"] for t in report["tensors"]]
    assert len(names) == len(set(names)) == 121
    # The model's own names, and temporaries named after what they come from.
    assert {"x", "stem", "lv", "lv3", "lv4", "gv", "x_layout_transform", "lv_subtract",
            "stem_bn_var_sqrt", "b0_conv1_layout_transform"} <= set(names)
    assert "global.texture-weight: the 5-D tensor [d0, d1, d2, d3, 4] is an image array of 1 " \
           "layer(s) of d0 rows x d1·d2·d3 texels" in (out / "report.md").read_text()
    # The demo's model file explains the same tensor lv3: the relu of the model.
    done = texscope("explain", out / "model.py", "--tensor", "lv3", "--svg", tmp_path / "lv3.svg")
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()[1:] if line and line[0] != " "
            and not line.startswith(("copies", "tensors per scope", "graph: "))]
    assert [r[:3] for r in rows] == [["lv_add", "add", "1x8x28x28x4"],
                                     ["lv3", "relu", "1x8x28x28x4"],
                                     ["lv4", "pool", "1x8x14x14x4"]]
    svg = (tmp_path / "lv3.svg").read_text()
    assert svg.count('class="node"') == 3 and "lv_add" in svg and "lv_subtract" not in svg
    assert svg != (out / "report.svg").read_text()
    # Running the demo again into its own directory needs no --force.
    assert texscope("demo", "-o", out).returncode == 0


def test_vulkan_says_it_cannot_run_and_writes_no_kernels(tmp_path):
    _one_error_line(texscope("run", RULES, "--module", "Seed", "--target", "adreno-vulkan"),
                    "texscope run runs OpenCL kernels, and vulkan kernels cannot be built or run "
                    "with this TVM (it has no SPIR-V code generator); `texscope build --target "
                    "adreno-vulkan` still writes the plan and report")
    done = texscope("build", RULES, "--module", "Seed", "--target", "adreno-vulkan",
                    "-o", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "out" / "kernels.cl").exists()
    assert "kernels.cl" not in done.stdout


def test_the_readme_checks_work_after_a_plain_import():
    env = dict(os.environ, PYTHONPATH=str(REPO))
    code = ("import texscope, texscope.models.examples as ex\n"
            "mod = texscope.texture_scope_pipeline('qcom/adreno-opencl-texture')(ex.Seed)\n"
            "print(texscope.diagnostics.verify.check_invariants(mod, 'qcom/adreno-opencl-texture'))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          check=False, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[]\n"


# Makes ``import graphviz`` fail, as after a plain ``pip install texscope``.
NO_GRAPHVIZ = """import sys

class _NoGraphviz:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "graphviz" or name.startswith("graphviz."):
            raise ModuleNotFoundError("No module named 'graphviz'", name="graphviz")
        return None

sys.meta_path.insert(0, _NoGraphviz)
"""


def test_without_the_graphviz_package_builds_skip_the_graph(tmp_path):
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(NO_GRAPHVIZ)
    model = tmp_path / "conv_relu.onnx"
    conv_relu_onnx(model)
    done = texscope("build", model, "-o", tmp_path / "out", extra_path=[tmp_path / "site"])
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # nor TVM's "Scope Saving" warnings
    assert f"written to {tmp_path / 'out'}: kernels.cl, model.so, plan.json, report.html, " \
           "report.json, report.md, weights.npz\n" in done.stdout
    assert "(the graph needs the graphviz Python package (pip install graphviz))" \
        in (tmp_path / "out" / "report.html").read_text()
    _one_error_line(texscope("explain", model, "--svg", tmp_path / "g.svg",
                             extra_path=[tmp_path / "site"]),
                    "drawing the graph needs the graphviz Python package "
                    "(pip install graphviz)")
    assert not (tmp_path / "g.svg").exists()


def test_a_reader_that_stops_early_gets_no_traceback():
    # `texscope ops | head -1`: the pipe's reader is gone before texscope writes.
    proc = subprocess.Popen(["texscope", "ops"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert err == b"" and proc.returncode == 1
