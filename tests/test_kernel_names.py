"""PrimFuncs named after more operators than an OpenCL compiler takes in a
kernel name are renamed by their start and a digest, their calls too."""

import tvm
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

import pytest

from texscope.backend.lowering import kernel_names
from texscope.backend.lowering.kernel_names import ShortenKernelNames, short_name

from conftest import run_pass


@pytest.fixture(autouse=True)
def bound_of_40(monkeypatch):
    """Names of TVMScript functions shorter than the real bound."""
    monkeypatch.setattr(kernel_names, "LONGEST", 40)


@I.ir_module
class LongNamed:
    @T.prim_func(private=True, s_tir=True)
    def fused_add_multiply_subtract_divide_maximum_minimum_exp_log_sqrt(
            x: T.Buffer((4,), "float32"), y: T.Buffer((4,), "float32")):
        for i in range(4):
            with T.sblock("y"):
                v = T.axis.spatial(4, i)
                y[v] = x[v] + T.float32(1)

    @T.prim_func(private=True, s_tir=True)
    def fused_add(x: T.Buffer((4,), "float32"), y: T.Buffer((4,), "float32")):
        for i in range(4):
            with T.sblock("y"):
                v = T.axis.spatial(4, i)
                y[v] = x[v] + T.float32(2)

    @R.function
    def main(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        cls = LongNamed
        with R.dataflow():
            a = R.call_tir(cls.fused_add_multiply_subtract_divide_maximum_minimum_exp_log_sqrt,
                           (x,), out_ty=R.Tensor((4,), "float32"))
            b = R.call_tir(cls.fused_add, (a,), out_ty=R.Tensor((4,), "float32"))
            R.output(b)
        return b


@I.ir_module
class ShortNamed:
    @T.prim_func(private=True, s_tir=True)
    def fused_add_multiply_subtract_25718a2b(
            x: T.Buffer((4,), "float32"), y: T.Buffer((4,), "float32")):
        for i in range(4):
            with T.sblock("y"):
                v = T.axis.spatial(4, i)
                y[v] = x[v] + T.float32(1)

    @T.prim_func(private=True, s_tir=True)
    def fused_add(x: T.Buffer((4,), "float32"), y: T.Buffer((4,), "float32")):
        for i in range(4):
            with T.sblock("y"):
                v = T.axis.spatial(4, i)
                y[v] = x[v] + T.float32(2)

    @R.function
    def main(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        cls = ShortNamed
        with R.dataflow():
            a = R.call_tir(cls.fused_add_multiply_subtract_25718a2b,
                           (x,), out_ty=R.Tensor((4,), "float32"))
            b = R.call_tir(cls.fused_add, (a,), out_ty=R.Tensor((4,), "float32"))
            R.output(b)
        return b


def test_a_long_name_is_its_start_and_a_digest_and_its_calls_follow():
    out = run_pass(ShortenKernelNames, LongNamed)
    # (GlobalVars are compared by position: the names are checked below.)
    tvm.ir.assert_structural_equal(out, ShortNamed, map_free_vars=True)
    assert sorted(g.name_hint for g in out.functions) == sorted(g.name_hint for g in ShortNamed.functions)


def test_short_names_stay_and_long_ones_stay_apart():
    assert short_name("fused_add", set()) == "fused_add"
    first = "fused_" + "_".join(["conv2d_NCHWc_OIHWo_opencl", "add", "relu"] * 3)
    second = first + "_multiply"
    assert short_name(first, set()) != short_name(second, set())
    assert all(len(short_name(n, set())) <= 40 for n in (first, second))
    # A digest prefix already taken: the next name keeps more of the digest.
    taken = {short_name(first, set())}
    again = short_name(first, taken)
    assert again not in taken and len(again) <= 40
    assert again[-9:-1] == short_name(first, set())[-8:]
