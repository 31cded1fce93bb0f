"""PyTorch models: a program saved with ``torch.export.save`` (``.pt2``), or a
module and example inputs, through TVM's ``relax.frontend.torch``.

``main`` takes the inputs under the names of the module's ``forward``
arguments and returns its outputs under the names torch.export gives them
(a returned dict's keys, else the names of the graph's output nodes).
Weights are constants.  Operators TVM's frontend has no converter for are
one :class:`TexscopeError` naming each.
"""

from __future__ import annotations

import ast
import logging
import re
from pathlib import Path

import tvm
from tvm import relax

from ..errors import TexscopeError
from ..ir.quiet import quiet_native_stderr
from .naming import name_outputs

# TVM's frontend asserts this before converting anything.
_MISSING = re.compile(r"Unsupported function types (\[.*\])")


def _torch():
    try:
        import torch
        from tvm.relax.frontend.torch import from_exported_program
    except ImportError as err:
        raise TexscopeError("PyTorch models need torch: pip install torch") from err
    return torch, from_exported_program


def _output_names(program) -> list[str]:
    spec = program.call_spec.out_spec
    # A module returning a dict of tensors: its keys, in torch's flattening order.
    if spec is not None and spec.type is dict and spec.num_leaves == len(spec.context):
        return [str(key) for key in spec.context]
    return list(program.graph_signature.user_outputs)


def from_exported(program, source: str = "the exported program") -> tvm.IRModule:
    """A Relax module from a ``torch.export.ExportedProgram``.

    Parameters
    ----------
    program : torch.export.ExportedProgram
        The program (``torch.export.export`` or ``torch.export.load``).
    source : str
        What errors name (the file it came from).

    Returns
    -------
    tvm.IRModule
        ``main`` with the program's input and output names; a single output
        returned as a tensor, several as a tuple.

    Raises
    ------
    TexscopeError
        Naming the operators TVM's frontend cannot convert, or the frontend's
        last line where it fails otherwise.
    """
    _, from_exported_program = _torch()
    failure = None
    with quiet_native_stderr():
        try:
            mod = from_exported_program(program, unwrap_unit_return_tuple=True)
        except Exception as err:  # the frontend raises anything
            failure = _frontend_failure(source, err)
            err.with_traceback(None)
    if failure is not None:
        raise failure
    # The frontend binds a single output to a second variable; one is enough.
    return name_outputs(relax.transform.CanonicalizeBindings()(mod), _output_names(program))


def _frontend_failure(source: str, err: Exception) -> TexscopeError:
    text = str(err).strip()
    missing = _MISSING.search(text)
    if missing:
        names = sorted(ast.literal_eval(missing.group(1)))
        return TexscopeError(f"{source}: TVM's PyTorch frontend has no converter for "
                             f"{', '.join(names)}")
    last = text.splitlines()[-1] if text else ""
    return TexscopeError(f"{source}: TVM's PyTorch frontend failed: "
                         f"{type(err).__name__}{': ' + last if last else ''}")


def from_torch(module, example_inputs, dynamic_shapes=None) -> tvm.IRModule:
    """A Relax module from a PyTorch module, exported (``torch.export``) in
    eval mode on ``example_inputs``.

    Parameters
    ----------
    module : torch.nn.Module
        The model; put in eval mode (batch norm uses its running statistics).
    example_inputs : tuple of torch.Tensor
        Inputs of the shapes the model is built for.
    dynamic_shapes : optional
        Passed to ``torch.export.export`` (symbolic sizes).

    Returns
    -------
    tvm.IRModule
        As :func:`from_exported`.
    """
    torch, _ = _torch()
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    name = type(module).__name__
    try:
        program = torch.export.export(module.eval(), tuple(example_inputs),
                                      dynamic_shapes=dynamic_shapes)
    except Exception as err:  # torch.export raises its own family of errors
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise TexscopeError(f"{name}: torch.export failed: {type(err).__name__}"
                            f"{': ' + first if first else ''}") from None
    return from_exported(program, name)


def load_exported(path) -> tvm.IRModule:
    """A Relax module from a ``.pt2`` file written by ``torch.export.save``."""
    torch, _ = _torch()
    file = Path(path)
    # torch.export logs a warning of several lines before it raises.
    quiet = logging.getLogger("torch.export")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        program = torch.export.load(str(file))
    except Exception as err:  # zipfile, pickle and torch errors alike
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise TexscopeError(f"{file}: not a readable torch.export program "
                            f"({type(err).__name__}{': ' + first if first else ''})") from None
    finally:
        quiet.setLevel(level)
    return from_exported(program, str(file))


def eager_outputs(path, inputs) -> list:
    """What PyTorch itself computes from the ``.pt2`` program at ``path`` on
    ``inputs`` (numpy arrays, in order), flattened as :func:`from_exported`
    returns them: the reference an import is checked against."""
    torch, _ = _torch()
    program = torch.export.load(str(path))
    with torch.no_grad():
        outputs = program.module()(*(torch.from_numpy(a) for a in inputs))
    return [t.detach().numpy() for t in torch.utils._pytree.tree_leaves(outputs)]
