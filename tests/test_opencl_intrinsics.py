"""The math functions TVM 0.27 names as C does on OpenCL build and compute."""

import numpy as np
import pytest
from tvm import relax

import texscope
from texscope import opencl
from texscope.tvm_workarounds import opencl_intrinsics
from texscope.diagnostics import verify

# Inputs inside each function's domain.
DOMAIN = {"acos": (-0.9, 0.9), "asin": (-0.9, 0.9), "atanh": (-0.9, 0.9), "acosh": (1.1, 3.0)}


def _elementwise(name: str) -> relax.Function:
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 16), "float32"))
    y = relax.Var("y", relax.TensorType((1, 16), "float32"))
    function = getattr(relax.op, name)
    with bb.function("main", [x, y] if name == "atan2" else [x]):
        with bb.dataflow():
            out = bb.emit_output(function(y, x) if name == "atan2" else function(x))
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("name", opencl_intrinsics.MISSING_IN_TVM)
def test_each_function_tvm_names_as_c_does_builds_and_computes_on_opencl(name):
    """Without the rules the device compiler rejects the kernel
    ("use of undeclared identifier 'atan2f'")."""
    mod = _elementwise(name)
    rng = np.random.default_rng(0)
    low, high = DOMAIN.get(name, (-3.0, 3.0))
    inputs = [rng.uniform(low, high, (1, 16)).astype("float32")
              for _ in mod["main"].params]
    result = texscope.build(mod, "adreno-opencl")
    assert f" {name}(" in result.opencl_source and f"{name}f(" not in result.opencl_source
    check = verify.compare(opencl.run(result, inputs).outputs,
                           verify.reference_outputs(mod, inputs), rtol=1e-5, atol=1e-6)
    assert check.ok, check


def test_registering_again_registers_nothing():
    assert opencl_intrinsics.register() == ()
