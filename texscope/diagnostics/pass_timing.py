"""Where a build's time goes, per pass.

:class:`PassProfile` is a pass instrument: it times every pass TVM runs
(nested ones too: a ``Sequential`` and the passes in it), and sums per pass
name the time spent in the pass itself, outside the passes it runs.

:func:`threaded_share` splits a one-thread build's time into the passes
that spread their work over threads and the rest, which bounds what more
threads can give (Amdahl's law).
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


@attrs.frozen
class ThreadedShare:
    """A build timed on one thread, split by where its time can be shared.

    Attributes
    ----------
    threaded_seconds : float
        Time in the passes that spread their work over threads.
    serial_seconds : float
        The rest of the build, which runs on one thread whatever the count.
    """

    threaded_seconds: float
    serial_seconds: float

    def least_seconds(self, jobs: int) -> float:
        """The build's wall-clock time on ``jobs`` threads, were the threaded
        work split evenly and nothing lost to sharing CPUs: a lower bound."""
        return self.serial_seconds + self.threaded_seconds / max(jobs, 1)


def threaded_share(passes: list[PassTime], total_seconds: float,
                   threaded: tuple[str, ...]) -> ThreadedShare:
    """``total_seconds`` of a one-thread build split into the time inside the
    passes named ``threaded`` (nested passes included; none of them may run
    inside another) and the rest."""
    inside = sum(p.seconds for p in passes if p.name in threaded)
    return ThreadedShare(round(inside, 6), round(max(total_seconds - inside, 0.0), 6))


def render(passes: list[PassTime], total_seconds: float, top: int = 15,
           threaded: tuple[str, ...] = (), jobs: int = 1) -> str:
    """The ``top`` passes by their own time, as a table for a terminal; with
    ``threaded`` (the names of the passes that spread their work over
    threads), a last line with their share and the least time ``jobs``
    threads can take."""
    lines = [f"{'own s':>8} {'share':>6} {'with nested s':>13} {'runs':>5}  pass"]
    for entry in passes[:top]:
        share = entry.self_seconds / total_seconds if total_seconds else 0.0
        lines.append(f"{entry.self_seconds:>8.3f} {share:>6.1%} {entry.seconds:>13.3f} "
                     f"{entry.calls:>5}  {entry.name}")
    outside = total_seconds - sum(p.self_seconds for p in passes)
    lines.append(f"{outside:>8.3f} {outside / total_seconds if total_seconds else 0:>6.1%} "
                 f"{'':>13} {'':>5}  (outside passes: code generation, LLVM, Python glue)")
    if threaded:
        share = threaded_share(passes, total_seconds, threaded)
        fraction = share.threaded_seconds / total_seconds if total_seconds else 0.0
        lines.append(
            f"on threads (kernels scheduled and lowered): {share.threaded_seconds:.3f} s of "
            f"{total_seconds:.3f} ({fraction:.0%}); the other {share.serial_seconds:.3f} s run "
            f"on one, so {jobs} thread{'s' * (jobs != 1)} take {share.least_seconds(jobs):.3f} s "
            "at best")
    return "\n".join(lines)
