"""Where a build's time goes, per pass.

:class:`PassProfile` is a pass instrument: it times every pass TVM runs
(nested ones too: a ``Sequential`` and the passes in it), and sums per pass
name the time spent in the pass itself, outside the passes it runs.
"""

from __future__ import annotations

import time

import attrs
import tvm


@attrs.frozen
class PassTime:
    """One pass name's share of a build.

    Attributes
    ----------
    name : str
        The pass's name (``tvm.transform.PassInfo.name``).
    calls : int
        How often it ran.
    seconds : float
        Time inside it, passes it ran included.
    self_seconds : float
        Time inside it, passes it ran excluded.
    """

    name: str
    calls: int
    seconds: float
    self_seconds: float


@tvm.instrument.pass_instrument
class PassProfile:
    """Times every pass run under the PassContext that holds it."""

    def __init__(self):
        self._open: list[list] = []  # [name, start, seconds in nested passes]
        self._totals: dict[str, list] = {}  # name -> [calls, seconds, self seconds]

    def run_before_pass(self, _mod, info):
        self._open.append([info.name, time.perf_counter(), 0.0])

    def run_after_pass(self, _mod, info):
        while self._open:  # a pass that raised left its entry open
            name, start, nested = self._open.pop()
            if name == info.name:
                break
        else:
            return
        seconds = time.perf_counter() - start
        total = self._totals.setdefault(name, [0, 0.0, 0.0])
        total[0] += 1
        total[1] += seconds if not any(o[0] == name for o in self._open) else 0.0
        total[2] += seconds - nested
        if self._open:
            self._open[-1][2] += seconds

    def passes(self) -> list[PassTime]:
        """Every pass name, the most time spent in it first."""
        return sorted(
            (PassTime(name, calls, round(seconds, 6), round(own, 6))
             for name, (calls, seconds, own) in self._totals.items()),
            key=lambda p: -p.self_seconds,
        )


def render(passes: list[PassTime], total_seconds: float, top: int = 15) -> str:
    """The ``top`` passes by their own time, as a table for a terminal."""
    lines = [f"{'own s':>8} {'share':>6} {'with nested s':>13} {'runs':>5}  pass"]
    for entry in passes[:top]:
        share = entry.self_seconds / total_seconds if total_seconds else 0.0
        lines.append(f"{entry.self_seconds:>8.3f} {share:>6.1%} {entry.seconds:>13.3f} "
                     f"{entry.calls:>5}  {entry.name}")
    outside = total_seconds - sum(p.self_seconds for p in passes)
    lines.append(f"{outside:>8.3f} {outside / total_seconds if total_seconds else 0:>6.1%} "
                 f"{'':>13} {'':>5}  (outside passes: code generation, LLVM, Python glue)")
    return "\n".join(lines)
