"""Device memory of a build, as the Relax VM would allocate it.

Read from ``main`` after TVM's memory planning and ``KillAfterLastUse``
(the module :class:`MemoryCapture` keeps): the VM allocates each
``memory.alloc_storage`` when it reaches it, ``prod(shape)`` bytes whatever
its dtype (as measured: a float32 storage of shape ``[2**28]`` grows the
process by 256 MiB), and frees it at its ``memory.kill_storage``; parameters and constants live throughout.  The peak
is the most bytes live at once along main's bindings.  A storage counts as
an image when a texture-scoped tensor lives in it.

TVM 0.27's planner sizes a storage that holds textures at four times the
bytes of its largest tensor (buffers' storages are exactly as large).  The ``*_needed_bytes`` figures size every storage by the
largest tensor it holds instead: what the plan itself needs.
"""

from __future__ import annotations

import math

import attrs
import tvm
from tvm import relax

from ..knowledge.targets import is_texture_scope

PLANNED_PASS = "KillAfterLastUse"


@attrs.frozen
class DeviceMemory:
    """Bytes of device memory one run of ``main`` needs.

    Attributes
    ----------
    peak_bytes : int
        The most bytes live at once: parameters, constants and the planned
        storages then allocated.
    inputs_bytes : int
        Parameters (inputs and weights) and constants.
    image_bytes : int
        Planned storages holding textures (images), all of them.
    buffer_bytes : int
        Planned storages holding buffers, all of them.
    peak_needed_bytes : int
        The peak with every storage as large as its largest tensor.
    image_needed_bytes : int
        Storages holding textures, each as large as its largest tensor.
    """

    peak_bytes: int
    inputs_bytes: int
    image_bytes: int
    buffer_bytes: int
    peak_needed_bytes: int
    image_needed_bytes: int


def _tensor_bytes(ty) -> int:
    if isinstance(ty, relax.TupleType):
        return sum(_tensor_bytes(field) for field in ty.fields)
    shape = getattr(ty, "shape", None)
    if not isinstance(ty, relax.TensorType) or not isinstance(shape, relax.ShapeExpr):
        return 0
    dims = [int(d) if isinstance(d, tvm.tirx.IntImm) else 0 for d in shape.values]
    dtype = tvm.DataType(str(ty.dtype))
    return math.prod(dims) * dtype.bits * dtype.lanes // 8


def _storage_bytes(call: relax.Call) -> int:
    return math.prod(int(d) if isinstance(d, tvm.tirx.IntImm) else 0 for d in call.args[0].values)


def _op_name(value) -> str:
    if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
        return value.op.name
    return ""


def _constants(func: relax.Function) -> int:
    seen: dict = {}

    def visit(expr):
        if isinstance(expr, tvm.ir.expr.GenericConst):
            seen[expr] = _tensor_bytes(expr.ty)
        elif isinstance(expr, relax.Tuple):
            for field in expr.fields:
                visit(field)
        elif isinstance(expr, relax.Call):
            for arg in expr.args:
                visit(arg)

    for block in func.body.blocks:
        for binding in block.bindings:
            visit(binding.value)
    return sum(seen.values())


def device_memory(mod: tvm.IRModule, function: str = "main") -> DeviceMemory:
    """The device memory of ``function`` of a module after ``KillAfterLastUse``."""
    func = mod[function]
    inputs = sum(_tensor_bytes(p.ty) for p in func.params) + _constants(func)
    sizes: dict[relax.Var, int] = {}
    needed: dict[relax.Var, int] = {}
    images: set[relax.Var] = set()
    holder: dict[relax.Var, relax.Var] = {}  # tensor -> its storage
    references: dict[relax.Var, int] = {}  # storage -> the storage var and live tensors
    events: list[tuple[relax.Var, int]] = []  # (storage, +1 allocated / -1 freed)

    def drop(storage):
        references[storage] -= 1
        if not references[storage]:
            events.append((storage, -1))

    for block in func.body.blocks:
        for binding in block.bindings:
            value, name = binding.value, _op_name(binding.value)
            if name == "relax.memory.alloc_storage":
                sizes[binding.var] = _storage_bytes(value)
                references[binding.var] = 1
                events.append((binding.var, 1))
            elif name == "relax.memory.alloc_tensor" and value.args[0] in sizes:
                storage = holder[binding.var] = value.args[0]
                references[storage] += 1
                needed[storage] = max(needed.get(storage, 0), _tensor_bytes(binding.var.ty))
                vdevice = getattr(binding.var.ty, "vdevice", None)
                if vdevice is not None and is_texture_scope(str(vdevice.memory_scope)):
                    images.add(storage)
            elif name == "relax.memory.kill_storage" and value.args[0] in sizes:
                drop(value.args[0])
            elif name == "relax.memory.kill_tensor" and value.args[0] in holder:
                drop(holder.pop(value.args[0]))

    def peak(size_of) -> int:
        live = top = inputs
        for storage, step in events:
            live += step * size_of(storage)
            top = max(top, live)
        return top

    image_bytes = sum(size for var, size in sizes.items() if var in images)
    return DeviceMemory(
        peak_bytes=peak(sizes.__getitem__), inputs_bytes=inputs, image_bytes=image_bytes,
        buffer_bytes=sum(sizes.values()) - image_bytes,
        peak_needed_bytes=peak(lambda s: needed.get(s, sizes[s])),
        image_needed_bytes=sum(needed.get(var, 0) for var in images),
    )


@tvm.instrument.pass_instrument
class MemoryCapture:
    """Keeps the Relax module right after memory planning and kill insertion."""

    def __init__(self):
        self.modules = []

    def run_after_pass(self, mod, info):
        if info.name == PLANNED_PASS:
            self.modules.append(mod)
