"""Time per pass: the PassProfile instrument and ``texscope build --profile``."""

import os
import re
import subprocess
from pathlib import Path

import pytest
import tvm

from modules import folding
from texscope.backend.build import THREADED_PASSES, build
from texscope.diagnostics.pass_timing import (PassProfile, PassTime, ThreadedShare, render,
                                              threaded_share)
from texscope.frontend.model_file import load_model

RULES = str(Path(__file__).parent / "modules" / "rules.py")


def _identity(name):
    @tvm.transform.module_pass(opt_level=0, name=name)
    def identity(mod, _ctx):
        return mod

    return identity


def test_nested_passes_are_counted_once_in_their_own_time():
    inner = _identity("inner")
    outer = tvm.transform.Sequential([inner, inner, _identity("other")], name="outer")
    profile = PassProfile()
    with tvm.transform.PassContext(instruments=[profile]):
        outer(folding.NothingToFold)
        outer(folding.NothingToFold)
    passes = {p.name: p for p in profile.passes()}
    assert {name: p.calls for name, p in passes.items()} == {"outer": 2, "inner": 4, "other": 2}
    nested = passes["inner"].seconds + passes["other"].seconds
    assert passes["outer"].seconds >= nested
    # Each figure is rounded to the microsecond on its own: three roundings of
    # at most 0.5 us each separate the two sides.
    assert abs(passes["outer"].self_seconds - (passes["outer"].seconds - nested)) <= 1.5e-6 + 1e-12
    assert all(p.seconds == p.self_seconds for name, p in passes.items() if name != "outer")
    table = render(profile.passes(), passes["outer"].seconds)
    assert table.splitlines()[0].split()[-1] == "pass"
    assert [line.split()[-1] for line in table.splitlines()[1:4]] == sorted(
        ["outer", "inner", "other"], key=lambda n: -passes[n].self_seconds)


def test_build_profile_prints_the_passes_costliest_first(tmp_path):
    done = subprocess.run(
        ["texscope", "build", RULES, "--module", "Residual", "-o", str(tmp_path / "out"),
         "--profile"], capture_output=True, text=True, check=True)
    # The table ends where "written to ..." begins.
    printed = done.stdout.split("time per pass")[1].split("written to")[0].splitlines()[2:]
    rows = [re.match(r"\s*([\d.]+)\s+([\d.]+)%\s+([\d.]+)\s+(\d+)\s+(\S+)$", line)
            for line in printed
            if not line.strip().endswith("Python glue)") and not line.startswith("on threads")]
    assert all(rows), printed
    assert len(rows) == 15  # the top 15 of the build's passes
    own = [float(row.group(1)) for row in rows]
    assert own == sorted(own, reverse=True)
    # Scheduling kernels is among the costliest passes of any build.
    assert "texscope.ScheduleKernels" in [row.group(5) for row in rows[:5]]


def test_build_profile_says_what_the_threads_could_take_at_best(tmp_path):
    done = subprocess.run(
        ["texscope", "build", RULES, "--module", "Residual", "-o", str(tmp_path / "out"),
         "--profile", "-j", "3"], capture_output=True, text=True, check=True)
    total = float(re.search(r"build time: ([\d.]+) ms", done.stdout).group(1)) / 1e3
    line = next(l for l in done.stdout.splitlines() if l.startswith("on threads"))
    threaded, of, serial, least = (float(x) for x in re.match(
        r"on threads \(kernels scheduled and lowered\): ([\d.]+) s of ([\d.]+) \(\d+%\); "
        r"the other ([\d.]+) s run on one, so 3 threads take ([\d.]+) s at best$", line).groups())
    assert of == pytest.approx(total, abs=1e-3)
    assert threaded + serial == pytest.approx(of, abs=2e-3)
    assert least == pytest.approx(serial + threaded / 3, abs=2e-3)
    assert 0 < threaded < of
    # A renamed pass would drop out of the share unnoticed.
    assert set(THREADED_PASSES) <= _pass_names(RULES, "Residual")


def test_the_threaded_passes_bound_what_more_threads_can_give():
    passes = [PassTime("texscope.LowerKernels", 1, 0.300, 0.010),
              PassTime("s_tir.StmtSimplify", 9, 0.120, 0.120),  # runs inside LowerKernels
              PassTime("texscope.ScheduleKernels", 1, 0.100, 0.100),
              PassTime("LegalizeOps", 3, 0.050, 0.050)]
    share = threaded_share(passes, 0.600, ("texscope.ScheduleKernels", "texscope.LowerKernels"))
    assert share == ThreadedShare(threaded_seconds=0.4, serial_seconds=0.2)
    assert share.least_seconds(1) == pytest.approx(0.6)
    assert share.least_seconds(4) == pytest.approx(0.3)
    table = render(passes, 0.600, threaded=("texscope.ScheduleKernels", "texscope.LowerKernels"),
                   jobs=4)
    assert table.splitlines()[-1] == (
        "on threads (kernels scheduled and lowered): 0.400 s of 0.600 (67%); the other 0.200 s "
        "run on one, so 4 threads take 0.300 s at best")
    assert "on threads" not in render(passes, 0.600)


def _pass_names(path, module) -> set:
    profile = PassProfile()
    with tvm.transform.PassContext(instruments=[profile]):
        build(load_model(path, module), "adreno-opencl", jobs=1)
    return {p.name for p in profile.passes()}


def test_build_profile_with_a_wrong_jobs_variable_writes_nothing(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(
        ["texscope", "build", RULES, "--module", "Residual", "-o", str(out), "--profile"],
        capture_output=True, text=True, env={**os.environ, "TEXSCOPE_JOBS": "abc"})
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "TEXSCOPE_JOBS='abc'" in done.stderr
    assert not out.exists()
