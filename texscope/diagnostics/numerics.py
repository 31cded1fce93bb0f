"""Outputs compared with their references, without TVM (the portable replay
uses it where only numpy is installed)."""

from __future__ import annotations

import attrs
import numpy as np

from ..errors import TexscopeError


@attrs.frozen
class Comparison:
    """Outputs of two modules on the same inputs."""

    outputs: int
    max_abs_error: float
    max_rel_error: float
    ok: bool
    #: The largest error over its output's largest magnitude.
    max_scaled_error: float = float("inf")

    def line(self, reference: str) -> str:
        """What the commands print of it: ``against <reference>: ...``."""
        return (f"against {reference}: max abs error {self.max_abs_error:.3g} "
                f"({self.max_scaled_error:.2g} of its output's largest magnitude), "
                f"max rel error {self.max_rel_error:.3g} -> {'OK' if self.ok else 'MISMATCH'}")


def compare(actual, expected, rtol: float = 1e-4, atol: float = 1e-4,
            of_scale: bool = False) -> Comparison:
    """Compare two lists of outputs as ``numpy.allclose`` does, with the largest errors.

    A NaN or infinity in ``actual`` is a mismatch.  With ``of_scale``,
    ``atol`` is a fraction of each output's largest magnitude: two float32
    builds summing in other orders differ by a fraction of the output's
    range, which an absolute tolerance misses on large outputs (a
    segmentation reaching 1315 differs by 0.14) and a relative one on small
    elements of them.

    Raises
    ------
    TexscopeError
        If ``expected`` holds a NaN or an infinity: the inputs are not valid
        for the model, and a comparison would prove nothing.
    """
    actual, expected = list(actual), list(expected)
    for position, reference in enumerate(expected):
        if not np.all(np.isfinite(reference)):
            raise TexscopeError(
                f"the reference output {position} holds NaN or infinity: the inputs are "
                "not valid for the model (a negative variance?), so nothing can be compared")
    if len(expected) != len(actual):
        return Comparison(len(expected), float("inf"), float("inf"), False)
    if any(a.shape != e.shape for a, e in zip(actual, expected)):
        return Comparison(len(expected), float("inf"), float("inf"), False)
    ok = all(np.allclose(a, e, rtol=rtol,
                         atol=atol * float(np.abs(e).max(initial=0.0)) if of_scale else atol)
             for a, e in zip(actual, expected))
    with np.errstate(invalid="ignore"):
        errors = [np.abs(a.astype("float64") - e) for a, e in zip(actual, expected)]
    if not all(np.all(np.isfinite(err)) for err in errors):
        return Comparison(len(expected), float("inf"), float("inf"), False)
    abs_err = max((float(err.max(initial=0.0)) for err in errors), default=0.0)
    rel_err = max(
        (float((err / (np.abs(e) + atol)).max(initial=0.0)) for err, e in zip(errors, expected)),
        default=0.0,
    )
    scaled_err = max((float(err.max(initial=0.0)) / max(float(np.abs(e).max(initial=0.0)), 1e-30)
                      for err, e in zip(errors, expected)), default=0.0)
    return Comparison(len(expected), abs_err, rel_err, ok, scaled_err)
