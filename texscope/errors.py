"""The one error type texscope raises."""

from __future__ import annotations


class TexscopeError(Exception):
    """Bad input or an unsupported construct, located in the IR.

    Parameters
    ----------
    message : str
        What is wrong and, where possible, what to do about it.
    function : str, optional
        The Relax function at fault.
    binding : str, optional
        The binding (variable name) at fault.
    """

    def __init__(self, message: str, function: str | None = None, binding: str | None = None):
        self.function = function
        self.binding = binding
        where = ""
        if function is not None:
            where = f"function {function!r}"
            if binding is not None:
                where += f", binding {binding!r}"
            where += ": "
        super().__init__(where + message)
