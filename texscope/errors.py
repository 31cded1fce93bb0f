"""The one error type texscope raises."""

from __future__ import annotations

import re

try:
    from tvm_ffi import register_error
except ImportError:  # the TVM-free tools (replay, calibrate) run where TVM is not installed
    def register_error(cls):
        return cls

_LOCATION = re.compile(r"^function '([^']*)'(?:, binding '([^']*)')?: ", re.S)


# Registered with tvm_ffi so that an error raised inside a pass keeps its type
# when it crosses TVM's C++ pass infrastructure; only the message crosses, so
# the location is parsed back from it.
@register_error
class TexscopeError(RuntimeError):
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
        if function is None and (found := _LOCATION.match(message)):
            function, binding, message = found.group(1), found.group(2), message[found.end():]
        self.function = function
        self.binding = binding
        where = ""
        if function is not None:
            where = f"function {function!r}"
            if binding is not None:
                where += f", binding {binding!r}"
            where += ": "
        super().__init__(where + message)


def read_json(path, what: str):
    """The JSON document in ``path``; a missing, unreadable or malformed file
    is a :class:`TexscopeError` naming ``what`` it should hold (and the line)."""
    import json  # pylint: disable=import-outside-toplevel
    from pathlib import Path  # pylint: disable=import-outside-toplevel

    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise TexscopeError(f"no such {what}: {path}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise TexscopeError(f"cannot read {what} {path}: {err}") from None
    except json.JSONDecodeError as err:
        raise TexscopeError(f"{path}, line {err.lineno}: not JSON ({err.msg})") from None


def exit_status(run, prog: str) -> int:
    """The exit status of a command line ``run`` carries out.

    Parameters
    ----------
    run : callable
        The command, returning its exit status.
    prog : str
        The command's name, which starts the error line.

    Returns
    -------
    int
        ``run()``'s status; where it raises a :class:`TexscopeError`, 2, after
        printing the error as one line, ``<prog>: error: <message>``, on stderr.
    """
    import sys  # pylint: disable=import-outside-toplevel

    try:
        return run()
    except TexscopeError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader (``| head``) stopped early: stdout goes to nothing, so
        # that Python's flush at exit raises no second traceback.
        import os  # pylint: disable=import-outside-toplevel

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
