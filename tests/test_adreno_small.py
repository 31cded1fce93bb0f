"""Small modules of the kind TVM's own Adreno tests use, run as a user runs
them (issue 52): each builds, runs on OpenCL and matches the CPU, or is one
line saying what is missing."""

import subprocess
from pathlib import Path

import numpy as np
import pytest
import tvm

import texscope
from modules import adreno_small, symbolic
from texscope import opencl
from texscope.diagnostics import verify
from texscope.errors import TexscopeError
from texscope.frontend.input_shapes import with_input_shapes
from texscope.rewrites.decompose import DecomposeForCPU

SMALL = str(Path(__file__).parent / "modules" / "adreno_small.py")


def texscope_run(*args):
    return subprocess.run(["texscope", "run", SMALL, *args], capture_output=True, text=True)


@pytest.mark.parametrize("name", ["ConvPlaneBias", "ConvFma", "TransposeOIHW"])
def test_the_command_runs_and_matches_the_cpu(name):
    done = texscope_run("--module", name)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    (line,) = [l for l in done.stdout.splitlines() if l.startswith("against the CPU (llvm)")]
    assert line.endswith("-> OK")


def test_the_cpu_reference_decomposes_only_what_the_cpu_cannot_build():
    fma = DecomposeForCPU()(adreno_small.ConvFma)
    assert "ewise_fma" not in fma.script() and "R.multiply(c, s)" in fma.script()
    oihw = DecomposeForCPU()(adreno_small.TransposeOIHW)
    assert "conv2d_transpose" not in oihw.script()
    iohw = adreno_small.TransposeIOHW
    # TVM builds an IOHW transpose: the reference keeps it, so the GPU's
    # decomposition is checked against TVM's own kernel.
    tvm.ir.assert_structural_equal(DecomposeForCPU()(iohw), iohw)


def test_an_input_of_rank_only_is_one_line_then_runs_with_its_shape():
    done = texscope_run("--module", "RankOnly")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr == (f"texscope: error: {SMALL}: main's input 'x' has a rank (4) but no "
                           "shape; give it with --input-shape x=D0,D1,D2,D3\n")
    done = texscope_run("--module", "RankOnly", "--input-shape", "x=1,16,3")
    assert done.stderr == (f"texscope: error: {SMALL}: --input-shape x: 3 extents given, and "
                           "'x' has rank 4\n")
    done = texscope_run("--module", "RankOnly", "--input-shape", "x=1,16,28,28")
    assert done.returncode == 0, done.stderr
    assert "-> OK" in done.stdout


def test_input_shapes_retype_every_binding():
    shaped = with_input_shapes(adreno_small.RankOnly, {"x": [1, 16, 8, 8]})
    (binding,) = [b for b in shaped["main"].body.blocks[0].bindings if b.var.name == "r"]
    assert [int(d) for d in binding.var.ty.shape.values] == [1, 32, 8, 8]
    with pytest.raises(TexscopeError, match="no input of that name without a shape"):
        with_input_shapes(adreno_small.RankOnly, {"x": [1, 16, 8, 8], "w": [32, 16, 3, 3]})


def test_a_model_of_symbolic_size_runs_from_python_at_given_sizes():
    target = opencl.device_target(None, "adreno-opencl")
    comparison = texscope.run_on_opencl(symbolic.Stem, target, sizes={"h": 20, "w": 12})
    assert comparison.ok, comparison
    result = texscope.build(symbolic.Stem, target)
    (out,) = opencl.run(result, sizes={"h": 16, "w": 12}).outputs
    assert out.shape == (1, 8, 16, 12)
    inputs = verify.random_inputs(symbolic.Stem, sizes={"h": 16, "w": 12})
    with pytest.raises(TexscopeError, match="sizes: h=8, but the inputs give h=16"):
        opencl.run(result, inputs, sizes={"h": 8, "w": 12})
    with pytest.raises(TexscopeError, match=r"symbolic sizes \(h, w\)"):
        opencl.run(result)
    run = opencl.run(result, inputs, sizes={"h": 16, "w": 12})
    np.testing.assert_allclose(run.outputs[0], verify.reference_outputs(symbolic.Stem, inputs)[0],
                               rtol=1e-4, atol=1e-4)
