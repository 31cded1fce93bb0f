"""Reading a model file the user names: TVMScript in Python, ONNX, TFLite or
a PyTorch program saved with ``torch.export.save``.

Whatever is wrong with the file becomes one :class:`TexscopeError` naming the
file and, where Python or TVM says it, the line; TVM's C++ warnings about the
half-built module a failed parse leaves are dropped (:mod:`texscope.ir.quiet`).
"""

from __future__ import annotations

import importlib.util
import re
import sys
import traceback
import warnings
from pathlib import Path

import tvm

from ..errors import TexscopeError
from ..ir.quiet import quiet_native_stderr
from .naming import name_inputs, name_outputs

# TVM's diagnostics end with " --> file:line:col" under the message.
_DIAGNOSTIC_AT = re.compile(r"^\s*--> (.*):(\d+):(\d+)\s*$", re.M)
PRINTED_HEADER = "from tvm.script import ir as I, relax as R, tirx as T\n"


def _line_in(file: Path, err: BaseException) -> int | None:
    """The last line of ``file`` the traceback of ``err`` passes through."""
    lines = [frame.lineno for frame in traceback.extract_tb(err.__traceback__)
             if Path(frame.filename).resolve() == file.resolve()]
    return lines[-1] if lines else None


def _described(file: Path, err: BaseException) -> TexscopeError:
    """One line for an exception raised while running the model file."""
    if isinstance(err, SyntaxError) and err.filename and Path(err.filename).resolve() == file.resolve():
        return TexscopeError(f"{file}:{err.lineno}: Python syntax error: {err.msg}")
    text = str(err)
    found = _DIAGNOSTIC_AT.search(text)
    if isinstance(err, tvm.error.DiagnosticError) and found:
        message = text[:found.start()].strip().removeprefix("error:").strip()
        message = " ".join(message.split())
        return TexscopeError(f"{found.group(1)}:{found.group(2)}: TVMScript error: {message}")
    line = _line_in(file, err)
    where = f"{file}:{line}" if line else str(file)
    first = text.strip().splitlines()[0] if text.strip() else ""
    message = f"{type(err).__name__}: {first}" if first else type(err).__name__
    if isinstance(err, NameError) and getattr(err, "name", None) in {"I", "R", "T"}:
        message += (" (a module printed by mod.script() has its imports commented out; "
                    f"add `{PRINTED_HEADER.strip()}` at the top)")
    return TexscopeError(f"{where}: {message}")


def _run_python(file: Path) -> dict:
    name = f"texscope_model_{file.stem}"
    spec = importlib.util.spec_from_file_location(name, file)
    namespace = importlib.util.module_from_spec(spec)
    # TVMScript finds a module's source through sys.modules.
    sys.modules[name] = namespace
    sys.path.insert(0, str(file.parent))
    error = None
    try:
        with quiet_native_stderr():
            try:
                spec.loader.exec_module(namespace)
            except Exception as err:  # the user's file may raise anything
                error = _described(file, err)
            # Leaving the handler freed the traceback's frames, and with them
            # the parser's half-built module, while stderr is still filtered.
    finally:
        sys.path.remove(str(file.parent))
    if error is not None:
        raise error
    return vars(namespace)


def _load_onnx(file: Path) -> tvm.IRModule:
    try:
        import onnx
        from tvm.relax.frontend.onnx import from_onnx
    except ImportError as err:
        raise TexscopeError("ONNX models need the onnx package: pip install onnx") from err
    try:
        model = onnx.load(str(file))
    except Exception as err:  # protobuf raises its own DecodeError, or OSError
        raise TexscopeError(f"{file}: not a readable ONNX model ({type(err).__name__}: {err})") from None
    # The importer warns as it makes identifiers of names (input.1 -> input_1);
    # name_inputs gives the model's names back.
    with quiet_native_stderr(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Renaming name ")
        try:
            mod = from_onnx(model, keep_params_in_input=False)
        except Exception as err:  # the importer raises many types on unsupported graphs
            last = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
            raise TexscopeError(f"{file}: TVM's ONNX importer failed: {last}") from None
    weights = {init.name for init in model.graph.initializer}
    mod = name_inputs(mod, [i.name for i in model.graph.input if i.name not in weights])
    return name_outputs(mod, [output.name for output in model.graph.output])


FORMATS = ("a .py file defining a TVMScript IRModule, an .onnx file, a .tflite file "
           "or a .pt2 file (torch.export.save)")


def load_model(path: str, module_name: str | None = None) -> tvm.IRModule:
    """An IRModule from a Python file defining TVMScript modules, an ONNX file,
    a TFLite file (``.tflite``, through TVM's TFLite frontend) or a PyTorch
    program saved with ``torch.export.save`` (``.pt2``).  Imported models keep
    their input and output names.

    Raises
    ------
    TexscopeError
        Naming the file (and line) when the file is missing, cannot be run,
        defines no IRModule or several without ``module_name``.
    """
    file = Path(path)
    if not file.exists():
        raise TexscopeError(f"no such model file: {path}")
    if not file.is_file():
        raise TexscopeError(f"{path} is not a file; give {FORMATS}")
    if file.suffix == ".onnx":
        return _load_onnx(file)
    if file.suffix == ".tflite":
        from .tflite_model import load_tflite

        return load_tflite(file)
    if file.suffix == ".pt2":
        from .torch_model import load_exported

        return load_exported(file)
    if file.suffix != ".py":
        raise TexscopeError(f"{path}: unknown model format {file.suffix or '(no suffix)'!r}; "
                            f"give {FORMATS}")
    modules = {k: v for k, v in _run_python(file).items() if isinstance(v, tvm.IRModule)}
    if module_name is not None:
        if module_name not in modules:
            have = ", ".join(sorted(modules)) or "none"
            raise TexscopeError(f"{path} defines no IRModule named {module_name!r} (it defines: {have})")
        return modules[module_name]
    if not modules:
        raise TexscopeError(
            f"{path} defines no IRModule; texscope builds a module-level IRModule, such as "
            "a class decorated with @I.ir_module, or an .onnx file")
    if len(modules) > 1:
        raise TexscopeError(f"{path} defines {len(modules)} IRModules ({', '.join(sorted(modules))}); "
                            "pick one with --module")
    return next(iter(modules.values()))
