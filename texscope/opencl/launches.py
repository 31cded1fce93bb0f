"""Kernel launches, read off the TIR that TVM compiled.

Right after host/device splitting, each host PrimFunc keeps its tensor
parameters and launches device kernels with ``call_ffi_kernel``: the kernel's
name, one argument per kernel parameter (a tensor's data or a scalar), then
one extent per entry of the call's ``launch_params`` (``blockIdx.*`` and
``threadIdx.*``).  That is all an executor needs; nothing here is guessed.
"""

from __future__ import annotations

import math

import attrs
import tvm
import tvm_ffi
from tvm import tirx

from ..errors import TexscopeError
from ..ir.graph import static_dims
from ..knowledge.scopes import is_texture_scope
from .plan import ScalarArg, WorkspaceArg

_CALL_KERNEL = "tirx.call_ffi_kernel"
_BUFFER_DATA = "tirx.buffer_data"
_AXES = "xyz"
# CallingConv::kDeviceKernelLaunch: what SplitHostDevice marks a device kernel with.
_DEVICE_KERNEL = 2


@attrs.frozen
class ParamArg:
    """A kernel argument bound to the host function's tensor parameter ``index``.

    ``scope`` is the storage the kernel declares for it (``global`` for a
    buffer, a ``global.texture*`` flavour for an image).
    """

    index: int
    scope: str


@attrs.frozen
class Launch:
    """One kernel launch: OpenCL global and local work sizes (x, y, z)."""

    kernel: str
    args: tuple[ParamArg | WorkspaceArg | ScalarArg, ...]
    global_size: tuple[int, int, int]
    local_size: tuple[int, int, int]


def _host_function(func: tirx.PrimFunc) -> bool:
    return int(func.attrs.get("calling_conv", 0) if func.attrs else 0) != _DEVICE_KERNEL


def _unsupported(func_name: str, what: str) -> TexscopeError:
    return TexscopeError(f"PrimFunc {func_name!r}: the OpenCL executor does not support {what}")


class _HostReader:
    """Follows one host function's body: buffer declarations and launches."""

    def __init__(self, name: str, func: tirx.PrimFunc, kernels: dict[str, tirx.PrimFunc]):
        self.name = name
        self.kernels = kernels
        # Buffer var -> the tensor parameter index or workspace it aliases.
        self.tensor_of: dict = {param: i for i, param in enumerate(func.params)}
        self.launches: list[Launch] = []

    def visit(self, node, visitor):
        if isinstance(node, tirx.DeclBuffer):
            self.tensor_of[node.buffer] = self._bound(node.data)
        elif isinstance(node, (tirx.For, tirx.While)):
            raise _unsupported(self.name, "a host loop around kernel launches")
        elif isinstance(node, tirx.AllocBuffer):
            self.tensor_of[node.buffer] = self._workspace(node.buffer)
        elif isinstance(node, tvm.ir.Call) and getattr(node.op, "name", "") == _CALL_KERNEL:
            self.launches.append(self._launch(node))
            return
        visitor.default_visit(node)

    def _workspace(self, buffer) -> WorkspaceArg:
        ty = buffer.ty
        shape = static_dims(ty.shape)
        if is_texture_scope(ty.storage_scope) or shape is None:
            raise _unsupported(self.name, f"the workspace {buffer} ({ty.storage_scope}, {list(ty.shape)})")
        dtype = tvm.DataType(str(ty.dtype))
        nbytes = math.prod(shape) * dtype.bits * dtype.lanes // 8
        return WorkspaceArg(str(buffer.name), nbytes)

    def _bound(self, data) -> int | WorkspaceArg:
        """What a ``buffer_data(buffer)`` expression points at: a tensor
        parameter's index or a workspace."""
        if (isinstance(data, tvm.ir.Call) and data.op.name == _BUFFER_DATA
                and data.args[0] in self.tensor_of):
            return self.tensor_of[data.args[0]]
        raise _unsupported(self.name, f"kernel data that is not a tensor parameter ({data})")

    def _launch(self, call) -> Launch:
        kernel_name = str(call.args[0].value)
        kernel = self.kernels.get(kernel_name)
        if kernel is None:
            raise _unsupported(self.name, f"a launch of {kernel_name!r}, which is not a device kernel")
        n_params = len(kernel.params)
        args = tuple(
            self._arg(value, param) for value, param in zip(call.args[1:1 + n_params], kernel.params)
        )
        extents = call.args[1 + n_params:]
        grid, block = [1, 1, 1], [1, 1, 1]
        for tag, extent in zip(call.attrs.launch_params, extents):
            if not isinstance(extent, tvm.tirx.IntImm):
                raise _unsupported(self.name, f"the symbolic launch extent {tag} = {extent}")
            kind, _, axis = str(tag).partition(".")
            sizes = {"blockIdx": grid, "threadIdx": block}.get(kind)
            if sizes is None or axis not in _AXES:
                raise _unsupported(self.name, f"the launch parameter {tag}")
            sizes[_AXES.index(axis)] = int(extent.value)
        return Launch(
            kernel_name, args,
            tuple(g * b for g, b in zip(grid, block)), tuple(block),
        )

    def _arg(self, value, param) -> ParamArg | WorkspaceArg | ScalarArg:
        if isinstance(param.ty, tvm.ir.PointerType):
            bound = self._bound(value)
            if isinstance(bound, WorkspaceArg):
                return bound
            return ParamArg(bound, str(param.ty.storage_scope))
        if isinstance(value, (tvm.tirx.IntImm, tvm.tirx.FloatImm)):
            return ScalarArg(value.value, str(value.dtype))
        raise _unsupported(self.name, f"the run-time scalar argument {value}")


def kernel_launches(lowered: tvm.IRModule) -> dict[str, tuple[Launch, ...]]:
    """Host function name to the kernels it launches, in order."""
    kernels = {gv.name_hint: f for gv, f in lowered.functions.items()
               if isinstance(f, tirx.PrimFunc) and not _host_function(f)}
    table = {}
    for gv, func in lowered.functions.items():
        if not isinstance(func, tirx.PrimFunc) or not _host_function(func):
            continue
        reader = _HostReader(gv.name_hint, func, kernels)
        tvm_ffi.structural_visit(func.body, reader.visit)
        table[gv.name_hint] = tuple(reader.launches)
    return table
