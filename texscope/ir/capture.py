"""A pass instrument that keeps the modules a named pass is given or makes."""

from __future__ import annotations

import tvm


@tvm.instrument.pass_instrument
class PassCapture:
    """Keeps every module the pass ``pass_name`` is given (``before``) or
    makes (otherwise), in the order the passes ran.

    Parameters
    ----------
    pass_name
        The pass's name, as ``tvm.transform.PassInfo.name`` gives it.
    before
        Keep the pass's input rather than its output.
    """

    def __init__(self, pass_name: str, before: bool = False):
        self.pass_name, self.before, self.modules = pass_name, before, []

    def run_before_pass(self, mod, info):
        if self.before and info.name == self.pass_name:
            self.modules.append(mod)

    def run_after_pass(self, mod, info):
        if not self.before and info.name == self.pass_name:
            self.modules.append(mod)
