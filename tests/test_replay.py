"""The portable program: a build's plan on disk, replayed without TVM."""

import json
import subprocess
import sys
import textwrap
import types

import attrs
import numpy as np
import pytest
from tvm import relax

import texscope
from texscope.errors import TexscopeError
from texscope import opencl
from texscope.diagnostics import verify
from texscope.opencl.plan import CopyStep, KernelStep, TensorArg, read_plan
from texscope.opencl.replay import replay, taking_turns
from texscope.opencl.source import missing_extensions, pyopencl

from conftest import conv_reads_pay
from modules import rules

# Runs the replay module as `python -m` would, with every tvm import failing,
# and exits 3 if any tvm module got loaded all the same.
WITHOUT_TVM = textwrap.dedent("""
    import runpy, sys

    class NoTVM:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("tvm", "tvm_ffi"):
                raise ImportError(name + " is not installed here")

    sys.meta_path.insert(0, NoTVM())
    sys.argv = ["replay", *sys.argv[1:]]
    try:
        runpy.run_module("texscope.opencl.replay", run_name="__main__")
    finally:
        if [m for m in sys.modules if m.split(".")[0] in ("tvm", "tvm_ffi")]:
            sys.exit(3)
""")


def replay_without_tvm(*args):
    return subprocess.run([sys.executable, "-c", WITHOUT_TVM, *map(str, args)],
                          capture_output=True, text=True)


@pytest.fixture(scope="module")
def conflict():
    """rules.Conflict with its 3x3 weights bound as a constant: a plan with a
    copy (image -> buffer), constants, a tuple output and inputs."""
    rng = np.random.default_rng(1)
    w = (rng.uniform(-1, 1, (8, 8, 3, 3)) / np.sqrt(72)).astype("float32")
    mod = relax.transform.BindParams("main", {"w": w})(rules.Conflict)
    inputs = verify.random_inputs(mod)
    # Prices under which c is a texture copied for the reductions.
    result = texscope.build(mod, "adreno-opencl", profile=conv_reads_pay())
    return types.SimpleNamespace(mod=mod, inputs=inputs, result=result,
                                 plan=opencl.plan_of(result))


def test_the_plan_holds_the_copy_the_constants_and_the_launches(conflict):
    plan = conflict.plan
    (copy,) = [s for s in plan.steps if isinstance(s, CopyStep)]
    assert plan.spec(copy.source).is_texture and not plan.spec(copy.target).is_texture
    assert len(plan.inputs) == 2 and len(plan.outputs) == 3
    assert plan.constants and all(plan.spec(n).shape == a.shape
                                  for n, a in plan.constants.items())
    # Every launch names declared tensors, with the scope the program holds them in.
    for step in plan.steps:
        if isinstance(step, KernelStep):
            for arg in step.args:
                if isinstance(arg, TensorArg):
                    assert plan.spec(arg.tensor).scope == arg.scope
    assert conflict.result.report.build["copies_left"] == 1


def test_the_plan_round_trips_through_its_files(conflict, tmp_path):
    written = conflict.plan.write(tmp_path)
    assert sorted(p.name for p in written) == ["kernels.cl", "plan.json", "weights.npz"]
    again = read_plan(tmp_path)
    assert again == conflict.plan
    assert again.constants.keys() == conflict.plan.constants.keys()
    for name, value in conflict.plan.constants.items():
        np.testing.assert_array_equal(again.constants[name], value)


def test_replay_without_tvm_gives_the_numbers_of_opencl_run(conflict, tmp_path):
    conflict.result.export(tmp_path / "out")
    np.savez(tmp_path / "inputs.npz", *conflict.inputs)
    in_process = opencl.run(conflict.result, conflict.inputs)
    expected = verify.reference_outputs(conflict.mod, conflict.inputs)
    np.savez(tmp_path / "expected.npz", *expected)
    done = replay_without_tvm(tmp_path / "out", "--inputs", tmp_path / "inputs.npz",
                              "--expected", tmp_path / "expected.npz",
                              "--save-outputs", tmp_path / "outputs.npz",
                              "--times", tmp_path / "times.json")
    assert done.returncode == 0, done.stderr
    assert "1 copies" in done.stdout and "-> OK" in done.stdout
    with np.load(tmp_path / "outputs.npz") as saved:
        replayed = [saved[name] for name in conflict.plan.outputs]
    for got, want in zip(replayed, in_process.outputs):
        np.testing.assert_array_equal(got, want)
    assert verify.compare(replayed, expected, 1e-3, 1e-3).ok
    times = json.loads((tmp_path / "times.json").read_text())
    assert times["copies"] == 1 and len(times["commands"]) == len(in_process.times)
    assert in_process.seconds == pytest.approx(sum(t.seconds for t in in_process.times))
    assert in_process.seconds > 0


def test_replay_reports_a_mismatch_with_exit_status_1(conflict, tmp_path):
    conflict.result.export(tmp_path / "out")
    np.savez(tmp_path / "inputs.npz", *conflict.inputs)
    wrong = [o + 0.5 for o in verify.reference_outputs(conflict.mod, conflict.inputs)]
    np.savez(tmp_path / "expected.npz", *wrong)
    done = replay_without_tvm(tmp_path / "out", "--inputs", tmp_path / "inputs.npz",
                              "--expected", tmp_path / "expected.npz")
    assert done.returncode == 1 and "-> MISMATCH" in done.stdout


def test_replay_compares_within_the_tolerance_of_each_outputs_largest_magnitude(conflict,
                                                                                tmp_path):
    """As ``texscope run``: the third output reaches 7, and a shift of half
    the tolerance of that (3.5e-3) is admitted, although it is more than
    the tolerance itself wherever the output is below 2.5; twice the
    tolerance of that is not."""
    conflict.result.export(tmp_path / "out")
    np.savez(tmp_path / "inputs.npz", *conflict.inputs)
    reference = verify.reference_outputs(conflict.mod, conflict.inputs)
    assert 5 < float(np.abs(reference[2]).max()) and (np.abs(reference[2]) < 2.5).any()
    for shift, verdict in ((0.5, "OK"), (2.0, "MISMATCH")):
        shifted = [o + shift * 1e-3 * float(np.abs(o).max()) for o in reference]
        np.savez(tmp_path / "expected.npz", *shifted)
        done = replay_without_tvm(tmp_path / "out", "--inputs", tmp_path / "inputs.npz",
                                  "--expected", tmp_path / "expected.npz")
        assert done.returncode == (0 if verdict == "OK" else 1), done.stderr
        (line,) = [x for x in done.stdout.splitlines() if x.startswith("against")]
        assert line.endswith(f"-> {verdict}") and "of its output's largest magnitude" in line


def _plan_dir(conflict, tmp_path, edit):
    out = tmp_path / "plan"
    out.mkdir()
    conflict.plan.write(out)
    data = json.loads((out / "plan.json").read_text())
    text = edit(data)
    (out / "plan.json").write_text(text if isinstance(text, str) else json.dumps(data))
    return out


def _drop_tensor(data):
    data["tensors"] = [t for t in data["tensors"] if t["name"] != data["outputs"][0]]


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(version=99), r"plan version 99; this texscope reads versions 1 to 2"),
    (lambda d: d.update(format="other"), r"not a texscope OpenCL plan"),
    (lambda d: d.pop("steps"), r"incomplete plan \(KeyError: 'steps'\)"),
    (_drop_tensor, r"steps name tensors the plan does not declare"),
    (lambda d: '{\n "format": "texscope-opencl-plan",\n oops\n}', r"plan.json:3: not JSON"),
])
def test_a_broken_plan_is_one_line_exit_2(conflict, tmp_path, edit, message):
    out = _plan_dir(conflict, tmp_path, edit)
    with pytest.raises(texscope.TexscopeError, match=message):
        read_plan(out)
    done = replay_without_tvm(out)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("replay: error: ") and done.stderr.count("\n") == 1


def test_replay_refuses_a_directory_without_a_plan_and_existing_output_files(conflict, tmp_path):
    done = replay_without_tvm(tmp_path)
    assert done.returncode == 2 and "no plan.json; write one with `texscope build" in done.stderr
    conflict.plan.write(tmp_path)
    mine = tmp_path / "mine.npz"
    mine.write_bytes(b"the user's")
    done = replay_without_tvm(tmp_path, "--save-outputs", mine)
    assert done.returncode == 2 and "exists; replay writes only new files" in done.stderr
    assert mine.read_bytes() == b"the user's"


def test_inputs_by_name_or_position_and_a_wrong_file_is_named(conflict, tmp_path):
    conflict.plan.write(tmp_path)
    np.savez(tmp_path / "named.npz", **dict(zip(conflict.plan.inputs, conflict.inputs)))
    np.savez(tmp_path / "wrong.npz", nothing=np.zeros(1))
    assert replay_without_tvm(tmp_path, "--inputs", tmp_path / "named.npz").returncode == 0
    done = replay_without_tvm(tmp_path, "--inputs", tmp_path / "wrong.npz")
    assert done.returncode == 2
    assert f"must be named {', '.join(conflict.plan.inputs)} (or be arr_0..arr_1)" in done.stderr


def test_importing_texscope_loads_no_tvm_until_a_name_needs_it():
    script = textwrap.dedent("""
        import sys
        import texscope, texscope.opencl, texscope.opencl.replay, texscope.knowledge.scopes
        assert not [m for m in sys.modules if m.split(".")[0] == "tvm"], "tvm loaded early"
        import texscope.backend.build
        assert callable(texscope.build) and callable(texscope.collect_consumer)
        assert callable(texscope.diagnostics.verify.check_invariants)
        assert callable(texscope.opencl.run)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_half_kernels_need_cl_khr_fp16_and_the_device_is_asked():
    source = texscope.build(rules.Seed, "adreno-opencl").opencl_source
    half = "#ifdef cl_khr_fp16\n#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n#endif\n"
    assert missing_extensions(source, types.SimpleNamespace(extensions="")) == []
    without = types.SimpleNamespace(extensions="cl_khr_fp64 cl_khr_int64_base_atomics")
    assert missing_extensions(half + source, without) == ["cl_khr_fp16"]
    with_half = types.SimpleNamespace(extensions="cl_khr_fp64 cl_khr_fp16")
    assert missing_extensions(half + source, with_half) == []


def test_run_replays_the_plan_it_makes(conflict, monkeypatch):
    """texscope.opencl.run is plan_of then replay: what the disk replay runs."""
    seen = []
    monkeypatch.setattr("texscope.opencl.executor.replay",
                        lambda plan, inputs, device=None: seen.append(plan) or "ran")
    assert opencl.run(conflict.result, conflict.inputs) == "ran"
    assert seen == [conflict.plan]



def test_replay_does_not_ask_the_driver_for_kernel_names(conflict, monkeypatch):
    """NVIDIA's OpenCL (driver 580) corrupted the heap answering
    CL_PROGRAM_KERNEL_NAMES for pose_landmark_full: the kernels are known
    from the source."""
    cl = pyopencl()

    def refuse(_program):
        raise AssertionError("CL_PROGRAM_KERNEL_NAMES queried")

    monkeypatch.setattr(cl.Program, "kernel_names", property(refuse), raising=False)
    run = replay(conflict.plan, conflict.inputs)
    assert verify.compare(run.outputs, verify.reference_outputs(conflict.mod, conflict.inputs),
                          1e-3, 1e-3).ok


def test_a_kernel_missing_from_the_source_is_named(conflict):
    step = next(s for s in conflict.plan.steps if isinstance(s, KernelStep))
    broken = attrs.evolve(conflict.plan, steps=(attrs.evolve(step, kernel="no_such_kernel"),))
    with pytest.raises(texscope.TexscopeError, match="kernel no_such_kernel is not in the OpenCL"):
        replay(broken, conflict.inputs)


def test_a_steady_session_gives_the_one_shot_replays_numbers_run_after_run(conflict):
    """Set up once, run on other inputs and back: each run's outputs are
    those of a fresh one-shot replay of its own inputs, bit for bit."""
    other = [(a * 0.5 + 0.25).astype(a.dtype) for a in conflict.inputs]
    session = opencl.Session(conflict.plan)
    for inputs in (conflict.inputs, other, conflict.inputs):
        got = [o.copy() for o in session.run(inputs)]
        for mine, fresh in zip(got, replay(conflict.plan, inputs).outputs):
            np.testing.assert_array_equal(mine, fresh)
    assert not np.array_equal(session.run(other)[0], replay(conflict.plan, conflict.inputs).outputs[0])


def test_a_source_cut_into_parts_defines_each_kernel_once_and_runs_alike(conflict, monkeypatch):
    """A source of many kernels compiles as several programs at once; each
    part holds the head and whole kernels, and the session built from the
    parts gives the one-program session's numbers bit for bit."""
    from texscope.opencl import source as opencl_source

    names = list(opencl_source.kernel_signatures(conflict.plan.source))
    assert len(names) >= 2
    parts = opencl_source.source_parts(conflict.plan.source, len(names))
    assert 1 < len(parts) <= len(names)
    assert all(part.startswith(conflict.plan.source[:conflict.plan.source.find("// Function: ")])
               for part in parts)
    assert sorted(n for part in parts for n in opencl_source.kernel_signatures(part)) == sorted(names)
    assert all(not line.endswith(");") for part in parts for line in part.splitlines()
               if line.startswith("__kernel "))
    monkeypatch.setattr(opencl_source, "PARALLEL_FROM", 1)
    _, programs = opencl_source.compiled_kernels(conflict.plan.source, opencl_source.default_device(),
                                                 jobs=len(names))
    assert len({id(p) for p in programs.values()}) == len(parts)
    whole = opencl.Session(conflict.plan).run(conflict.inputs)
    in_parts = opencl.Session(conflict.plan, jobs=len(names)).run(conflict.inputs)
    for a, b in zip(whole, in_parts):
        np.testing.assert_array_equal(a, b)


def test_the_parts_compile_in_worker_processes_and_load_as_binaries(conflict, monkeypatch):
    """Each part is compiled by a process of its own and loaded here from
    its binary (a program made so has no source); where the workers die
    without a word, or a binary does not load, the parts compile in
    threads, from source; the numbers alike."""
    from texscope.opencl import source as opencl_source

    cl = opencl_source.pyopencl()
    names = list(opencl_source.kernel_signatures(conflict.plan.source))
    monkeypatch.setattr(opencl_source, "PARALLEL_FROM", 1)
    device = opencl_source.default_device()
    _, programs = opencl_source.compiled_kernels(conflict.plan.source, device, jobs=2)
    assert {p.get_info(cl.program_info.SOURCE) for p in programs.values()} == {""}
    in_processes = opencl.Session(conflict.plan, jobs=2).run(conflict.inputs)

    monkeypatch.setattr(sys, "executable", "/bin/false")  # every worker dies without a word
    _, programs = opencl_source.compiled_kernels(conflict.plan.source, device, jobs=2)
    assert len(programs) == len(names)
    assert all(name in p.get_info(cl.program_info.SOURCE) for name, p in programs.items())
    in_threads = opencl.Session(conflict.plan, jobs=2).run(conflict.inputs)
    for a, b in zip(in_processes, in_threads):
        np.testing.assert_array_equal(a, b)
    monkeypatch.undo()
    monkeypatch.setattr(opencl_source, "PARALLEL_FROM", 1)
    loaded, refused = [], []
    real_program = cl.Program

    def refusing_binaries(context, *args):
        if len(args) == 2:  # (devices, binaries): a binary this driver will not load
            refused.append(args)
            raise cl.LogicError("clBuildProgram", cl.status_code.INVALID_BINARY, "refused here")
        loaded.append(args)
        return real_program(context, *args)
    monkeypatch.setattr(cl, "Program", refusing_binaries)
    _, programs = opencl_source.compiled_kernels(conflict.plan.source, device, jobs=2)
    assert refused and len(programs) == len(names)
    assert len(loaded) == len(set(map(id, programs.values())))  # each part from source, once


def test_a_part_the_compiler_rejects_is_one_error_naming_the_device(monkeypatch):
    from texscope.opencl import source as opencl_source

    monkeypatch.setattr(opencl_source, "PARALLEL_FROM", 1)
    source = ("// Function: good\n__kernel void good(__global float* x) { x[0] = 1.0f; }\n"
              "// Function: bad\n__kernel void bad(__global float* x) { x[0] = undeclared; }\n")
    device = opencl_source.default_device()
    with pytest.raises(TexscopeError, match=f"{device.name.strip()} rejects the kernels"):
        opencl_source.compiled_kernels(source, device, jobs=2)


def test_a_profiled_run_without_inputs_reads_what_the_last_run_uploaded(conflict):
    session = opencl.Session(conflict.plan, profile=True)
    other = [(a * 0.5 + 0.25).astype(a.dtype) for a in conflict.inputs]
    first = session.profiled(conflict.inputs).outputs
    again = session.profiled(None).outputs
    changed = session.profiled(other).outputs
    kept = session.profiled(None).outputs
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(changed, kept):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first[0], changed[0])


def test_a_profiled_run_enqueues_untimed_work_before_a_command(conflict):
    """``before``: the callables given for a command run just before it, in
    order, and only the plan's commands are timed; the outputs unchanged."""
    session = opencl.Session(conflict.plan, profile=True)
    once = [o.copy() for o in session.profiled(conflict.inputs).outputs]
    order = []
    session.commands = [(binding, kernel, lambda i=i, enqueue=enqueue: order.append(i) or enqueue())
                        for i, (binding, kernel, enqueue) in enumerate(session.commands)]
    before = {1: [lambda: order.append("a"), lambda: order.append("b")]}
    touched = session.profiled(conflict.inputs, before=before)
    assert order == [0, "a", "b", *range(1, len(session.commands))]
    assert len(touched.times) == len(session.commands)
    for a, b in zip(once, touched.outputs):
        np.testing.assert_array_equal(a, b)


def test_a_steady_inference_allocates_nothing_and_binds_no_argument(conflict):
    session = opencl.Session(conflict.plan)

    def refuse(*_args):
        raise AssertionError("per-inference setup work")

    session.launcher.bound = refuse
    session.memory.allocate = refuse
    session.memory.upload = refuse
    times = session.wall_times(conflict.inputs, runs=4, warmup=1)
    assert len(times) == 4 and all(t > 0 for t in times)
    expected = verify.reference_outputs(conflict.mod, conflict.inputs)
    assert verify.compare(session.run(conflict.inputs), expected, 1e-3, 1e-3).ok


def test_a_session_refuses_inputs_of_another_shape(conflict):
    session = opencl.Session(conflict.plan)
    with pytest.raises(texscope.TexscopeError, match=r"expected shape"):
        session.run([a[..., :1] for a in conflict.inputs])


def test_replay_steady_prints_the_median_and_checks_the_sessions_outputs(conflict, tmp_path):
    conflict.result.export(tmp_path / "out")
    np.savez(tmp_path / "inputs.npz", *conflict.inputs)
    np.savez(tmp_path / "expected.npz", *verify.reference_outputs(conflict.mod, conflict.inputs))
    done = replay_without_tvm(tmp_path / "out", "--inputs", tmp_path / "inputs.npz",
                              "--expected", tmp_path / "expected.npz", "--steady", "5",
                              "--times", tmp_path / "times.json")
    assert done.returncode == 0, done.stderr
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("steady state:")]
    assert "per inference, median of 5" in line
    assert any(x.startswith("steady session against") and x.endswith("-> OK")
               for x in done.stdout.splitlines())
    steady = json.loads((tmp_path / "times.json").read_text())["steady"]
    assert steady["runs"] == 5 and 0 < steady["min_s"] <= steady["median_s"] <= steady["max_s"]
    done = replay_without_tvm(tmp_path / "out", "--steady", "0")
    assert done.returncode == 2 and "--steady 0: give a number of runs" in done.stderr


def test_programs_taking_turns_run_as_often_in_each_place():
    assert taking_turns(["a", "b", "c"], 4) == [["a", "b", "c"], ["b", "c", "a"],
                                                ["c", "a", "b"], ["a", "b", "c"]]
