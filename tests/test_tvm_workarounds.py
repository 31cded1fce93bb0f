"""Each workaround in ``texscope.tvm_workarounds`` still has its cause in the
installed TVM.

These are canaries: each test shows, on TVM alone, the behaviour a module
works around.  When one fails after a TVM upgrade, TVM no longer needs the
workaround: drop the module (and this test) rather than the assertion.
"""

import subprocess
import sys
import textwrap

import tvm
import tvm_ffi
from tvm import relax, s_tir
from tvm.script import tirx as T

from texscope.tvm_workarounds import hidden_conditions, known_type, opencl_intrinsics
from texscope.tvm_workarounds import unchecked_schedule


def test_tvm_names_the_inverse_trigonometric_functions_as_c_does_on_opencl():
    """``opencl_intrinsics``: TVM alone (no texscope imported, so none of its
    rules registered) writes ``atan2f``, which OpenCL C does not declare."""
    probe = textwrap.dedent("""
        import tvm
        from tvm import relax

        bb = relax.BlockBuilder()
        x = relax.Var("x", relax.TensorType((1, 16), "float32"))
        y = relax.Var("y", relax.TensorType((1, 16), "float32"))
        with bb.function("main", [x, y]):
            with bb.dataflow():
                out = bb.emit_output(relax.op.atan2(y, x))
            bb.emit_func_output(out)
        executable = tvm.compile(bb.get(), tvm.target.Target({"kind": "opencl"}, host="llvm"))
        (host,) = executable.mod.imports
        (device,) = [m for m in host.imports if m.kind == "opencl"]
        print("atan2f(" in device.inspect_source())
    """)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=300, check=True)
    assert done.stdout.split() == ["True"]
    assert "atan2" in opencl_intrinsics.MISSING_IN_TVM


@T.prim_func(private=True)
def _clamped(a: T.Buffer((8,), "int32"), b: T.Buffer((8,), "int32")):
    for i in range(8):
        b[i] = T.if_then_else(a[i] < 4, T.min(a[i], 4), 0)


@T.prim_func(private=True)
def _clamped_simplified(a: T.Buffer((8,), "int32"), b: T.Buffer((8,), "int32")):
    for i in range(8):
        b[i] = T.if_then_else(a[i] < 4, a[i], 0)


def test_tvms_simplifier_takes_an_if_then_else_condition_as_a_fact():
    """``hidden_conditions``: TVM's analyzer enters the condition as a fact
    while it simplifies the branch (``min(a, 4)`` is ``a`` under ``a < 4``),
    the cost texscope's lowering avoids where no pass needs the fact."""
    simplified = tvm.tirx.transform.StmtSimplify()(tvm.IRModule({"main": _clamped}))["main"]
    tvm.ir.assert_structural_equal(simplified, _clamped_simplified)
    hidden = tvm.IRModule({"main": hidden_conditions.conditions_hidden(_clamped)})
    kept = tvm.tirx.transform.StmtSimplify()(hidden)["main"]
    assert tvm_ffi.structural_equal(hidden_conditions.conditions_shown(kept), _clamped)


def test_tvm_checks_schedule_arguments_in_python():
    """``unchecked_schedule``: TVM's Schedule primitives are wrapped in its
    Python type checker, which the unchecked schedule calls past."""
    checked = [name for name, method in vars(s_tir.Schedule).items()
               if unchecked_schedule.is_type_checked(method)]
    assert {"split", "compute_at", "reverse_compute_at"} <= set(checked)


def test_a_relax_call_made_directly_has_no_known_type():
    """``known_type``: a call built from its parts carries no tensor type
    until it is normalized (type inference again), and TVM offers only a
    private function to give it the type already known."""
    x = relax.Var("x", relax.TensorType((2,), "float32"))
    call = relax.Call(tvm.ir.Op.get("relax.add"), [x, x])
    assert not isinstance(call.ty, relax.TensorType)
    typed = known_type.with_known_type(call, x.ty)
    assert typed.same_as(call) and isinstance(call.ty, relax.TensorType)
