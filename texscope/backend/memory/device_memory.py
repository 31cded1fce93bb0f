"""Device memory of a build, as the Relax VM would allocate it.

Read from ``main`` after TVM's memory planning and ``KillAfterLastUse``
(the module :class:`MemoryCapture` keeps): the VM allocates each
``memory.alloc_storage`` when it reaches it, ``prod(shape)`` bytes whatever
its dtype (``LowerRuntimeBuiltin`` hands the VM a ``uint8`` storage; as
measured: a float32 storage of shape ``[2**28]`` grows the process by 256
MiB), and frees it at its ``memory.kill_storage``; parameters and constants
live throughout.  The peak is the most bytes live at once along main's
bindings: what the plan needs.  The VM's pooled allocator keeps freed
storages for reuse instead of giving them back, which ``pooled_bytes``
follows.  A storage counts as an image when a texture-scoped tensor lives
in it: the OpenCL runtime allocates the storage as a buffer (TVM's
``DeviceScopeCompatibility.opencl`` makes every Adreno storage ``global``)
and views it as an image (``cl_khr_image2d_from_buffer``), whose rows start
at multiples of the target's ``image_base_address_alignment``.

TVM 0.27's ``StaticPlanBlockMemory`` sizes a storage that holds a texture at
the image's bytes times the bytes of one element (``StorageToken`` multiplies
the byte count ``DeviceGetMemSize.opencl`` returns by the dtype's size once
more): four times what a float32 image needs, twice a float16 one.
texscope's build assigns the storages again right after it
(:mod:`texscope.backend.memory.storage_plan`), each as large as its largest tensor;
:func:`SizeTextureStorages` sizes the storages that planner leaves (those of
symbolic tensors) the same way, as an image where the tensor is one.

Devices without ``cl_khr_image2d_from_buffer`` (PoCL) cannot view a buffer
as an image: TVM's runtime then makes a separate image for every texture
tensor, and texscope's replay (``texscope.opencl.replay``) allocates every
tensor once for the whole run (``RunResult.allocated_bytes``): neither is
this figure.
"""

from __future__ import annotations

import math

import attrs
import tvm
import tvm_ffi
from tvm import relax

from ...ir.graph import (ALLOC_STORAGE, ALLOC_TENSOR, KILL_STORAGE, KILL_TENSOR, element_bits,
                         static_bytes, static_dims)
from ...knowledge.scopes import (FLAVOUR_AXES, TEXEL_LANES, image_bytes, is_packed_texel_shape,
                                 is_texture_scope)

PLANNED_PASS = "KillAfterLastUse"
TVM_PLANNER = "StaticPlanBlockMemory"
# TVM's DeviceGetMemSize.opencl uses this row alignment where the target has none.
DEFAULT_ROW_ALIGNMENT = 64
# TVM's PooledAllocator::kDefaultPageSize: every pooled block is a multiple of it.
POOL_PAGE = 4096


@attrs.frozen
class DeviceMemory:
    """Bytes of device memory one run of ``main`` needs.

    Attributes
    ----------
    peak_bytes : int
        The most bytes live at once: parameters, constants and the planned
        storages then allocated, each as large as the plan says.
    inputs_bytes : int
        Parameters (inputs and weights) and constants.
    image_bytes : int
        Planned storages holding textures (images), all of them.
    buffer_bytes : int
        Planned storages holding buffers, all of them.
    texel_padding_bytes : int
        How much of the peak is texel padding: the peak with every storage
        as large as its largest tensor (an image's aligned rows where the
        tensor is one) less the peak with every storage as large as its
        largest tensor's values.  Independent of how large the planner made
        the storages, so a plan that oversizes them cannot hide in it.
    pooled_bytes : int
        What the VM's device allocator holds after one run: TVM's pooled
        allocator (the VM's default, and OpenCL's) rounds each storage up to
        4 KiB pages and keeps a freed one for a later storage of the same
        rounded size, never giving it back: parameters and constants, plus
        every storage no freed one of its size could serve.
    """

    peak_bytes: int
    inputs_bytes: int
    image_bytes: int
    buffer_bytes: int
    texel_padding_bytes: int
    pooled_bytes: int


def shape_expr_dims(shape) -> tuple[int, ...] | None:
    return static_dims(shape.values) if isinstance(shape, relax.ShapeExpr) else None


def pooled_bytes(events) -> int:
    """What TVM's pooled allocator holds after ``events``, (bytes, freed)
    pairs in the order they happen: a freed block, rounded up to whole
    pages, serves a later request of the same rounded size; others are new."""
    free: dict[int, int] = {}  # rounded size -> blocks in the pool
    held = 0
    for size, freed in events:
        size = -(-size // POOL_PAGE) * POOL_PAGE
        if freed:
            free[size] = free.get(size, 0) + 1
        elif free.get(size):
            free[size] -= 1
        else:
            held += size
    return held


def _image_bytes(shape, dtype: str, vdevice) -> int | None:
    """Bytes of the image a texture-scoped tensor is viewed as; None where
    the tensor is no image (a buffer, a symbolic or unpacked shape)."""
    scope = str(vdevice.memory_scope) if vdevice is not None else ""
    if not is_texture_scope(scope) or shape is None or not is_packed_texel_shape(shape):
        return None
    alignment = vdevice.target.attrs.get("image_base_address_alignment", DEFAULT_ROW_ALIGNMENT)
    try:
        return image_bytes(shape, element_bits(dtype) // 8, scope, int(alignment))
    except KeyError:  # a texture scope whose folding texscope does not know
        return None


def storage_bytes(call: relax.Call) -> int:
    return math.prod(int(d) if isinstance(d, tvm.tirx.IntImm) else 0 for d in call.args[0].values)


def op_name(value) -> str:
    if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
        return value.op.name
    return ""


def _vdevice_of(mod: tvm.IRModule, alloc_tensor: relax.Call, ty):
    """The VDevice of an ``alloc_tensor``: its type's, else the module's
    VDevice its index argument names (its type has none right after
    planning)."""
    vdevice = getattr(ty, "vdevice", None)
    if vdevice is not None:
        return vdevice
    index = alloc_tensor.args[4] if len(alloc_tensor.args) > 4 else None
    vdevices = mod.global_infos.get("vdevice", []) if mod.global_infos else []
    if isinstance(index, tvm.tirx.IntImm) and 0 <= int(index) < len(vdevices):
        return vdevices[int(index)]
    return None


@attrs.frozen
class _Tensor:
    """What one ``alloc_tensor`` asks of its storage."""

    values: int  # bytes of its elements
    image: int | None  # bytes of its image, None for a buffer
    shape: tuple[int, ...] | None = None  # None where symbolic
    itemsize: int = 0

    @property
    def needed(self) -> int:
        return self.values if self.image is None else max(self.values, self.image)


def allocated_tensor(mod, call: relax.Call, ty) -> _Tensor:
    shape = shape_expr_dims(call.args[2])
    dtype = str(call.args[3].value)
    itemsize = element_bits(dtype) // 8
    values = math.prod(shape) * itemsize if shape is not None else 0
    return _Tensor(values, _image_bytes(shape, dtype, _vdevice_of(mod, call, ty)), shape, itemsize)


def _constants(func: relax.Function) -> int:
    """Bytes of the distinct constants ``func`` holds."""
    seen: dict[int, int] = {}

    def on_constant(constant, _visitor):
        seen[constant.__chandle__()] = static_bytes(constant.ty)

    # TVM walks the function; Python sees only its constants (a Python walk
    # of a 64-conv chain's lowered main: 4.6 ms, to find none).
    tvm_ffi.structural_visit(func.body, [(tvm.ir.expr.GenericConst, on_constant)])
    return sum(seen.values())


@attrs.frozen
class _Lifetimes:
    """The storages of a planned function, in the order the VM meets them."""

    inputs: int
    sizes: dict  # storage -> bytes as planned
    tensors: dict  # storage -> [_Tensor] made from it
    events: tuple  # (storage, +1 allocated / -1 freed)

    def peak(self, size_of) -> int:
        live = top = self.inputs
        for storage, step in self.events:
            live += step * size_of(storage)
            top = max(top, live)
        return top

    def pooled(self) -> int:
        """Bytes a pool of exact-size, page-rounded blocks ends up holding."""
        return self.inputs + pooled_bytes(
            (self.sizes[storage], step < 0) for storage, step in self.events)

    def largest(self, need):
        """Storage -> the largest ``need(tensor)`` of its tensors; a storage
        no tensor is made from still takes what the plan says."""
        # Once per storage, not per event: a storage holds tens of tensors.
        largest = {storage: max((need(t) for t in held), default=self.sizes[storage])
                   for storage, held in self.tensors.items()}
        return largest.__getitem__


def _lifetimes(mod: tvm.IRModule, function: str) -> _Lifetimes:
    func = mod[function]
    inputs = sum(static_bytes(p.ty) for p in func.params) + _constants(func)
    # Storages and tensors by their variables' handles: a variable read from
    # the IR is a new Python object each time, which a dict keyed by
    # variables compares with its key through TVM's ``__eq__`` (2.4 us a
    # lookup; 0.1 us by handle).
    sizes: dict[int, int] = {}
    tensors: dict[int, list[_Tensor]] = {}
    holder: dict[int, int] = {}  # tensor -> its storage
    references: dict[int, int] = {}  # storage -> the storage var and live tensors
    events: list[tuple[int, int]] = []

    def drop(storage):
        references[storage] -= 1
        if not references[storage]:
            events.append((storage, -1))

    for block in func.body.blocks[:]:
        for binding in block.bindings[:]:
            value, name = binding.value, op_name(binding.value)
            if name == ALLOC_STORAGE:
                storage = binding.var.__chandle__()
                sizes[storage] = storage_bytes(value)
                tensors[storage] = []
                references[storage] = 1
                events.append((storage, 1))
            elif name == ALLOC_TENSOR and (storage := value.args[0].__chandle__()) in sizes:
                holder[binding.var.__chandle__()] = storage
                references[storage] += 1
                tensors[storage].append(allocated_tensor(mod, value, binding.var.ty))
            elif name == KILL_STORAGE and (storage := value.args[0].__chandle__()) in sizes:
                drop(storage)
            elif name == KILL_TENSOR and (tensor := value.args[0].__chandle__()) in holder:
                drop(holder.pop(tensor))
    return _Lifetimes(inputs, sizes, tensors, tuple(events))


def device_memory(mod: tvm.IRModule, function: str = "main") -> DeviceMemory:
    """The device memory of ``function`` of a module after ``KillAfterLastUse``."""
    plan = _lifetimes(mod, function)
    images = {var for var, held in plan.tensors.items() if any(t.image is not None for t in held)}
    image_total = sum(size for var, size in plan.sizes.items() if var in images)
    return DeviceMemory(
        peak_bytes=plan.peak(plan.sizes.__getitem__), inputs_bytes=plan.inputs,
        image_bytes=image_total, buffer_bytes=sum(plan.sizes.values()) - image_total,
        texel_padding_bytes=(plan.peak(plan.largest(lambda t: t.needed))
                             - plan.peak(plan.largest(lambda t: t.values))),
        pooled_bytes=plan.pooled(),
    )


def _as_image(tensor: _Tensor, channel_axis: int, row_alignment: int) -> int:
    """Bytes of a 4-D tensor packed into texels (its channels in lanes of 4,
    the rest folded as the flavour that pads it least); other tensors' own."""
    if tensor.shape is None or len(tensor.shape) != 4:
        return tensor.values
    rest = [d for axis, d in enumerate(tensor.shape) if axis != channel_axis]
    packed = (rest[0], -(-tensor.shape[channel_axis] // TEXEL_LANES), rest[1], rest[2], TEXEL_LANES)
    return min(image_bytes(packed, tensor.itemsize, flavour, row_alignment)
               for flavour in FLAVOUR_AXES)


def buffers_as_images_peak(mod: tvm.IRModule, channel_axis: int = 1,
                           row_alignment: int = DEFAULT_ROW_ALIGNMENT,
                           function: str = "main") -> int:
    """The peak of an all-buffer plan had its 4-D tensors been images.

    The same storages and lifetimes, each storage as large as its largest
    tensor packed into texels: channels (``channel_axis``: 1 for NCHW, 3 for
    NHWC) rounded up to lanes of 4, the other axes folded into an image as
    the texture flavour that pads it least does, rows aligned to
    ``row_alignment`` bytes.  Less the plan's own peak, this is the texel
    padding a texture plan of the same model may add to it.
    """
    plan = _lifetimes(mod, function)
    return plan.peak(plan.largest(lambda t: _as_image(t, channel_axis, row_alignment)))


def _resized_storages(mod: tvm.IRModule, func: relax.Function) -> dict[relax.Var, int]:
    """Storage -> the bytes it needs, for storages holding an image that the
    planner made larger than their largest tensor needs."""
    planned: dict[relax.Var, int] = {}
    held: dict[relax.Var, list[_Tensor | None]] = {}
    for block in func.body.blocks[:]:
        for binding in block.bindings[:]:
            value, name = binding.value, op_name(binding.value)
            if name == ALLOC_STORAGE and shape_expr_dims(value.args[0]):
                planned[binding.var] = storage_bytes(value)
                held[binding.var] = []
            elif name == ALLOC_TENSOR and value.args[0] in held:
                static = shape_expr_dims(value.args[2]) is not None
                tensor = allocated_tensor(mod, value, binding.var.ty) if static else None
                held[value.args[0]].append(tensor)
    resized = {}
    for storage, tensors in held.items():
        # A symbolic tensor's need is unknown: leave its storage as planned.
        if not tensors or None in tensors or all(t.image is None for t in tensors):
            continue
        needed = max(t.needed for t in tensors)
        if needed < planned[storage]:
            resized[storage] = needed
    return resized


def _with_sizes(mod: tvm.IRModule, func: relax.Function,
                sizes: dict[relax.Var, int]) -> relax.Function:
    builder = relax.BlockBuilder(mod)  # types the new calls
    blocks = []
    for block in func.body.blocks[:]:
        bindings = []
        for binding in block.bindings[:]:
            if binding.var in sizes:
                call = binding.value
                shape = relax.ShapeExpr([tvm.tirx.IntImm("int64", sizes[binding.var])])
                value = builder.normalize(
                    relax.Call(call.op, [shape, *call.args[1:]], call.attrs, call.ty_args))
                # The storage's type does not depend on its size: keep its variable.
                binding = relax.VarBinding(binding.var, value)
            bindings.append(binding)
        blocks.append(type(block)(bindings))
    body = relax.SeqExpr(blocks, func.body.body)
    return builder.normalize(relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs))


@tvm.transform.module_pass(opt_level=0, name="texscope.SizeTextureStorages")
def SizeTextureStorages(mod: tvm.IRModule, _ctx) -> tvm.IRModule:  # pylint: disable=invalid-name
    """Size each storage holding an image by the largest tensor it holds.

    Run after ``StaticPlanBlockMemory``, which makes such storages larger by
    the dtype's size (see the module docstring), and after texscope's own
    planner, which sizes those it assigns already.  Every tensor of a
    planned storage starts at offset 0 and lives there alone, so the largest
    tensor is all the storage needs: an image's bytes with its rows aligned,
    a buffer's bytes.  Storages of buffers only, and those holding a tensor of
    symbolic shape, are left as planned.
    """
    functions = {}
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            sizes = _resized_storages(mod, func)
            if sizes:
                func = _with_sizes(mod, func, sizes)
        functions[gvar] = func
    return tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos)


@tvm.instrument.pass_instrument
class MemoryCapture:
    """Keeps the Relax module right after memory planning and kill insertion."""

    def __init__(self):
        self.modules = []

    def run_after_pass(self, mod, info):
        if info.name == PLANNED_PASS:
            self.modules.append(mod)
