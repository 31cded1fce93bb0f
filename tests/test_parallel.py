"""Kernels scheduled and lowered on several threads: the same output as on one."""

import threading

import pytest
import tvm
import tvm_ffi
from tvm import te
from tvm.script import tirx as T

import texscope
from conftest import ADRENO, BeforeScheduling, dlight_scheduled
from texscope.backend import parallel
from texscope.backend.schedules import kernels as schedule
from texscope.backend.build import build, device_source
from texscope.backend.schedules.kernels import ScheduleKernels, schedule_rules
from texscope.tvm_workarounds.unchecked_schedule import UncheckedSchedule, detailed_schedule_errors
from texscope.models import zoo


def test_chunks_are_consecutive_runs_of_at_least_the_smallest_size():
    assert parallel.chunks([1, 2, 3, 4, 5], 2) == [[1, 2, 3], [4, 5]]
    assert parallel.chunks([1, 2, 3, 4, 5], 3, smallest=2) == [[1, 2, 3], [4, 5]]
    # Too few for two parts of two: one part.
    assert parallel.chunks([1, 2, 3], 2, smallest=2) == [[1, 2, 3]]
    assert parallel.chunks([1, 2], 8) == [[1], [2]]


def test_jobs_come_from_the_limit_then_the_environment_then_the_cpus(monkeypatch):
    monkeypatch.delenv(parallel.JOBS_ENV, raising=False)
    import os

    assert parallel.build_jobs() == len(os.sched_getaffinity(0))
    monkeypatch.setenv(parallel.JOBS_ENV, "3")
    assert parallel.build_jobs() == 3
    with parallel.jobs_limit(5):
        assert parallel.build_jobs() == 5
    assert parallel.build_jobs() == 3
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv(parallel.JOBS_ENV, bad)
        with pytest.raises(texscope.TexscopeError, match=parallel.JOBS_ENV):
            parallel.build_jobs()
    with pytest.raises(texscope.TexscopeError, match="jobs=0"):
        with parallel.jobs_limit(0):
            pass


def test_map_in_order_runs_on_several_threads_under_the_callers_context():
    # Both tasks must be running at once to pass the barrier: one thread
    # would wait for the other task forever (here: 20 s, then fail).
    barrier = threading.Barrier(2, timeout=20)

    def task(item):
        barrier.wait()
        return item, tvm.target.Target.current().kind.name, \
            tvm.transform.PassContext.current().opt_level

    with tvm.transform.PassContext(opt_level=1), ADRENO:
        assert parallel.map_in_order(task, ["a", "b"], 2) == [("a", "opencl", 1),
                                                               ("b", "opencl", 1)]


def test_threads_schedule_as_dlights_apply_default_schedule_does():
    capture = BeforeScheduling()
    with tvm.transform.PassContext(instruments=[capture]):
        build(zoo.NETWORKS["unet"](), "adreno-opencl", jobs=1)
    rules = schedule_rules()
    with ADRENO:
        expected = dlight_scheduled(capture.module, *rules)
        on_threads = ScheduleKernels(*rules, jobs=3)(capture.module)
        on_one = ScheduleKernels(*rules, jobs=1)(capture.module)
    kernels = [g.name_hint for g, f in capture.module.functions.items()
               if isinstance(f, tvm.tirx.PrimFunc)]
    assert len(kernels) > 3
    assert not any(f.attrs.get("tirx.is_scheduled", False)
                   for f in capture.module.functions.values() if isinstance(f, tvm.tirx.PrimFunc))
    tvm.ir.assert_structural_equal(on_threads, expected)
    for gvar, func in expected.functions.items():
        assert on_threads[gvar.name_hint].script() == func.script()
    # The kernels keep the module's order, whatever the threads.
    for out in (on_threads, on_one):
        assert [g.name_hint for g in out.functions if g.name_hint in kernels] == kernels


def test_kernels_with_reductions_are_handed_to_the_threads_first(monkeypatch):
    capture = BeforeScheduling()
    with tvm.transform.PassContext(instruments=[capture]):
        build(zoo.NETWORKS["inception"](), "adreno-opencl", jobs=1)
    in_module = [g.name_hint for g, f in capture.module.functions.items()
                 if isinstance(f, tvm.tirx.PrimFunc)]
    handed = []

    def recording(fn, items, jobs, **kwargs):
        handed.extend(in_module[index] for index in items)
        return parallel.map_in_order(fn, items, jobs, **kwargs)

    monkeypatch.setattr(schedule, "map_in_order", recording)
    with ADRENO:
        ScheduleKernels(*schedule_rules(), jobs=2)(capture.module)
    # In the module, layout transforms come between the pool, the softmax and
    # the convs (10-20 ms each to schedule).  Handed out: the softmax (two
    # reduction blocks), then the pool and the conv (one), then the rest,
    # each group in module order.  The copies of the conv and of an unpack
    # reading a buffer get the schedules of those (tests/test_scope_variants.py).
    one = ["max_pool2d", "conv2d_NCHWc_OIHWo_opencl"]
    variants = ["conv2d_NCHWc_OIHWo_opencl1", "te_layout_transform21"]
    assert handed[0] == "softmax"
    assert handed[1:3] == [name for name in in_module if name in one]
    assert handed[3:] == [name for name in in_module
                          if name not in one + ["softmax"] + variants]
    assert in_module[:3] != handed[:3]


@pytest.mark.parametrize("name", ["resnet", "mobilenet_v2"])
def test_a_build_on_three_threads_equals_one_on_one(name):
    mod = zoo.NETWORKS[name]()
    one, three = build(mod, "adreno-opencl", jobs=1), build(mod, "adreno-opencl", jobs=3)
    assert (one.report.build["jobs"], three.report.build["jobs"]) == (1, 3)
    assert three.opencl_source == one.opencl_source
    assert device_source(three.executable, "llvm") == device_source(one.executable, "llvm") != ""
    assert three.executable.as_text() == one.executable.as_text()
    assert tvm_ffi.structural_equal(three.kernels, one.kernels)
    assert tvm_ffi.structural_equal(three.module, one.module)


@T.prim_func
def copy(a: T.Buffer((4,), "float32"), b: T.Buffer((4,), "float32")):
    for i in range(4):
        b[i] = a[i]


def _copies(count: int) -> tvm.IRModule:
    return tvm.IRModule({f"copy{i}": copy.with_attr("global_symbol", f"copy{i}")
                         for i in range(count)})


def test_a_pipeline_runs_on_parts_of_two_functions_at_least_and_joins_them_in_order():
    seen = []

    @tvm.transform.module_pass(opt_level=0, name="record")
    def record(mod, _ctx):
        seen.append(sorted(g.name_hint for g in mod.functions))
        return tvm.tirx.transform.AnnotateEntryFunc()(mod)

    mod = _copies(5)
    joined = parallel.per_chunk(record, jobs=4)(mod)
    assert sorted(seen) == [["copy0", "copy1", "copy2"], ["copy3", "copy4"]]
    assert [g.name_hint for g in joined.functions] == [g.name_hint for g in mod.functions]
    # No part of one function: none became the module's entry point.
    assert not any(f.attrs.get("tirx.is_entry_func", False) for f in joined.functions.values())
    seen.clear()
    parallel.per_chunk(record, jobs=4)(_copies(3))
    assert seen == [["copy0", "copy1", "copy2"]]


def test_parts_outnumber_the_threads_so_that_costly_kernels_even_out():
    seen, threads = [], set()

    @tvm.transform.module_pass(opt_level=0, name="record")
    def record(mod, _ctx):
        seen.append(sorted((g.name_hint for g in mod.functions), key=lambda n: int(n[4:])))
        threads.add(threading.get_ident())
        return mod

    joined = parallel.per_chunk(record, jobs=2)(_copies(20))
    assert sorted(seen, key=lambda part: int(part[0][4:])) == [
        [f"copy{i}" for i in range(start, end)]
        for start, end in ((0, 3), (3, 6), (6, 9), (9, 12), (12, 14), (14, 16), (16, 18), (18, 20))]
    assert len(threads) <= 2
    assert [g.name_hint for g in joined.functions] == [f"copy{i}" for i in range(20)]


def _chain_of_adds(length: int) -> tvm.tirx.PrimFunc:
    """A kernel of ``length`` element-wise blocks (a Schedule of it takes
    tens of milliseconds to build)."""
    x = te.placeholder((64,), name="x")

    def add_one(prev, index):
        return te.compute((64,), lambda i: prev[i] + 1.0, name=f"add{index}")

    y = x
    for index in range(length):
        y = add_one(y, index)
    return te.create_prim_func([x, y])


def _other_thread_progress(construct, func) -> int:
    """How far a spinning Python thread counts while ``construct(func)`` runs."""
    done, count = threading.Event(), [0]

    def spin():
        while not done.is_set():
            count[0] += 1

    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        while count[0] == 0:
            pass
        start = count[0]
        construct(func)
        return count[0] - start
    finally:
        done.set()
        spinner.join()


def test_a_schedule_is_built_without_holding_pythons_lock():
    """TVM's Schedule(func) analyses the kernel in C++ holding the GIL (its
    object constructor), texscope's by a call of TVM's constructor function,
    which releases it: another thread runs meanwhile (10-20 times as far on
    the development machine; asked here: 3 times).  The schedule is TVM's."""
    func = _chain_of_adds(1500)
    ours = UncheckedSchedule(func)
    tvm.ir.assert_structural_equal(ours.mod, tvm.s_tir.Schedule(func).mod)
    assert len(ours.trace.insts) == 0
    # Refused (the block writes the output): TVM's short message, or its
    # detailed report where asked for.
    short = r"^ScheduleError: Cannot operate on an output block$"
    with pytest.raises(tvm.s_tir.ScheduleError, match=short):
        ours.compute_inline(ours.get_sblock("add1499"))
    with detailed_schedule_errors():
        detailed = UncheckedSchedule(func)
    with pytest.raises(tvm.s_tir.ScheduleError, match=r"s_tir\.SBlock#0"):
        detailed.compute_inline(detailed.get_sblock("add1499"))
    assert _other_thread_progress(UncheckedSchedule, func) \
        > 3 * _other_thread_progress(tvm.s_tir.Schedule, func)
