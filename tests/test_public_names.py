"""Every name README.md and docs/ show resolves after a plain ``import
texscope`` (subpackages and their modules load on first access), the moved
``texscope.verify`` still works with a warning, and the documented entry
points take what the docs say they take."""

import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import texscope
from texscope.errors import TexscopeError
from texscope.opencl.replay import in_order

ROOT = Path(__file__).resolve().parent.parent
DOTTED = re.compile(r"\btexscope(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
FROM_IMPORT = re.compile(r"^\s*from (texscope(?:\.\w+)*) import \(?([\w, ]+)", re.M)
# Named in the issue that asked for this (relative to texscope.diagnostics).
ALSO = ("texscope.diagnostics.verify.check_invariants", "texscope.diagnostics.verify.equivalent",
        "texscope.diagnostics.verify.lifted_inputs", "texscope.diagnostics.explain.DumpStages",
        "texscope.diagnostics.exhaustive.realized_optimum",
        "texscope.models.corpus.mediapipe_models", "texscope.load_model", "texscope.from_torch")


def documented_names() -> list[str]:
    names = set(ALSO)
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text()
        names.update(DOTTED.findall(text))
        for module, imported in FROM_IMPORT.findall(text):
            names.update(f"{module}.{name.strip()}" for name in imported.split(",") if name.strip())
    return sorted(names)


def test_the_docs_name_things_to_check():
    names = documented_names()
    assert len(names) > 30 and "texscope.opencl.run" in names


def test_every_documented_name_resolves_after_a_plain_import():
    # A fresh interpreter: this one has imported the modules already.
    walk = ("import sys, texscope\n"
            "for dotted in sys.argv[1:]:\n"
            "    value = texscope\n"
            "    try:\n"
            "        for part in dotted.split('.')[1:]:\n"
            "            value = getattr(value, part)\n"
            "    except AttributeError as err:\n"
            "        print(dotted, err)\n")
    done = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", walk,
                           *documented_names()], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_the_moved_verify_module_works_with_a_deprecation_warning():
    with pytest.warns(DeprecationWarning, match=r"texscope.verify is now "
                                                r"texscope.diagnostics.verify"):
        moved = texscope.verify
    assert moved.equivalent is texscope.diagnostics.verify.equivalent
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert texscope.diagnostics.verify.equivalent is moved.equivalent


def test_a_missing_name_is_still_an_attribute_error():
    with pytest.raises(AttributeError, match="module 'texscope.diagnostics' has no attribute "
                                             "'no_such_module'"):
        texscope.diagnostics.no_such_module  # noqa: B018
    with pytest.raises(AttributeError, match="module 'texscope.opencl' has no attribute 'nope'"):
        texscope.opencl.nope  # noqa: B018


def test_build_takes_a_model_files_path(tmp_path):
    from test_cli import conv_relu_onnx

    conv_relu_onnx(tmp_path / "conv_relu.onnx")
    result = texscope.build(tmp_path / "conv_relu.onnx", "adreno-opencl")
    assert result.report.build["convs_reading_texture"] == 1
    assert texscope.opencl.plan_of(result).inputs == ("x",)
    with pytest.raises(TexscopeError, match="^no such model file: nowhere.onnx$"):
        texscope.build("nowhere.onnx", "adreno-opencl")
    with pytest.raises(TexscopeError, match="^texscope.build takes an IRModule or a model file's "
                                            "path, not int$"):
        texscope.build(3, "adreno-opencl")


def test_inputs_by_name_are_put_in_mains_order():
    a, b = np.zeros(1), np.ones(1)
    assert in_order(("x", "y"), {"y": b, "x": a}) == [a, b]
    assert in_order(("x", "y"), (a, b)) == [a, b]
    with pytest.raises(TexscopeError, match=r"^main's inputs are 'x', 'y': no array for 'y'$"):
        in_order(("x", "y"), {"x": a})
    with pytest.raises(TexscopeError, match=r"^main's inputs are 'x', 'y': no input named 'z'$"):
        in_order(("x", "y"), {"x": a, "y": b, "z": b})
