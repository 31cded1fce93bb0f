"""Time per pass: the PassProfile instrument and ``texscope build --profile``."""

import re
import subprocess
from pathlib import Path

import tvm

from modules import folding
from texscope.diagnostics.pass_timing import PassProfile, render

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
            for line in printed if not line.strip().endswith("Python glue)")]
    assert all(rows), printed
    assert len(rows) == 15  # the top 15 of the build's passes
    own = [float(row.group(1)) for row in rows]
    assert own == sorted(own, reverse=True)
    # Scheduling kernels is among the costliest passes of any build.
    assert "texscope.ScheduleKernels" in [row.group(5) for row in rows[:5]]
