"""Device memory by scope: buffers for ``global``, RGBA image arrays for textures.

A texture-scoped tensor ``[d0, d1, d2, d3, 4]`` is an ``image2d_array_t`` of
``layers x height x width`` RGBA texels, its outer axes folded as TVM's OpenCL
runtime folds them for the scope (``scopes.image_extent``).  Row-major order
of the tensor is then the image's own (x fastest, then y, then layer), so
uploads, downloads and buffer/image copies move the bytes unchanged.
"""

from __future__ import annotations

import functools
import json
import math

import numpy as np

from ..knowledge import scopes
from ..errors import TexscopeError
from ..knowledge.scopes import BUFFER_SCOPE, TEXEL_LANES
from .plan import TensorSpec

_CHANNEL_TYPES = {"float32": "FLOAT", "float16": "HALF_FLOAT"}


def image_extent(spec: TensorSpec) -> tuple[int, int, int]:
    """(width, height, layers) of a texture-scoped tensor's image."""
    if spec.scope not in scopes.FLAVOUR_AXES:
        raise TexscopeError(f"tensor {spec.name}: unknown texture scope {spec.scope!r}")
    if not scopes.is_packed_texel_shape(spec.shape):
        raise TexscopeError(f"tensor {spec.name}: a {spec.scope} image needs a 5-D shape with "
                            f"an inner axis of {TEXEL_LANES}, not {list(spec.shape)}")
    layers, height, width = scopes.image_extent(spec.shape, spec.scope)
    return width, height, layers


def texels(array: np.ndarray, spec: TensorSpec) -> np.ndarray:
    """The tensor as the image holds it: (layers, height, width, RGBA)."""
    width, height, layers = image_extent(spec)
    return np.ascontiguousarray(array).reshape(layers, height, width, TEXEL_LANES)


def fitted_target(target: str, spatial: int, depth: int) -> str:
    """Target JSON for ``texscope build --target``: the GPU of the build's
    ``target`` (a preset name or target JSON, as the plan records it; Adreno
    if neither says) with images no larger than ``spatial`` x ``depth``."""
    device = "mali" if target.startswith("mali") else "adreno"
    try:
        device = json.loads(target).get("device", device)
    except (ValueError, AttributeError):
        pass
    return json.dumps({"kind": "opencl", "device": device,
                       "keys": [device, "opencl", "gpu", "texture"],
                       "texture_spatial_limit": spatial, "texture_depth_limit": depth})


def allocation_bytes(spec: TensorSpec) -> int:
    """Bytes the replay asks OpenCL for to hold ``spec``: a buffer's values,
    an image's texels (4 values each; the driver may pad its rows further)."""
    itemsize = np.dtype(spec.dtype).itemsize
    if spec.is_texture:
        return math.prod(image_extent(spec)) * TEXEL_LANES * itemsize
    return max(math.prod(spec.shape) * itemsize, 1)


class DeviceMemory:
    """The memory objects of one run, one per tensor.

    Every tensor gets its own object, held until the run ends: no storage is
    shared over time as the Relax VM's plan shares them, since viewing one
    buffer as images of different shapes needs ``cl_khr_image2d_from_buffer``
    (PoCL has none).  ``allocated_bytes`` is what that costs.
    """

    def __init__(self, cl, context, queue, target: str = ""):
        self.cl = cl
        self.target = target  # the build's, for a target that fits the device
        self.context = context
        self.queue = queue
        self.objects: dict[TensorSpec, object] = {}
        self.allocated_bytes = 0

    def allocate(self, spec: TensorSpec):
        if spec in self.objects:
            return self.objects[spec]
        cl = self.cl
        flags = cl.mem_flags.READ_WRITE
        if spec.is_texture:
            if spec.dtype not in _CHANNEL_TYPES:
                raise TexscopeError(f"tensor {spec.name}: {spec.dtype} is not an image texel type")
            fmt = cl.ImageFormat(cl.channel_order.RGBA,
                                 getattr(cl.channel_type, _CHANNEL_TYPES[spec.dtype]))
            extent = image_extent(spec)
            device = self.queue.device
            limits = (device.image2d_max_width, device.image2d_max_height,
                      device.image_max_array_size)
            if any(size > limit for size, limit in zip(extent, limits)):
                raise TexscopeError(
                    f"tensor {spec.name}: its {spec.scope} image is {extent[0]} x {extent[1]} "
                    f"texels x {extent[2]} layers, over this device's {limits[0]} x {limits[1]} "
                    f"x {limits[2]}; build for it with `texscope build ... --fit-device` "
                    "where TVM sees this device, or with --target "
                    f"'{fitted_target(self.target, min(limits[:2]), limits[2])}'")
            memory = cl.create_image(self.context, flags, fmt, shape=extent, is_array=True)
        else:
            memory = cl.Buffer(self.context, flags, size=allocation_bytes(spec))
        self.objects[spec] = memory
        self.allocated_bytes += allocation_bytes(spec)
        return memory

    def images(self) -> int:
        """How many images this run made."""
        return sum(isinstance(key, TensorSpec) and key.is_texture for key in self.objects)

    def workspace(self, key, nbytes: int):
        """Scratch buffer ``key`` of at least ``nbytes``."""
        if key not in self.objects:
            self.objects[key] = self.cl.Buffer(self.context, self.cl.mem_flags.READ_WRITE,
                                               size=max(nbytes, 1))
            self.allocated_bytes += max(nbytes, 1)
        return self.objects[key]

    def _region(self, spec: TensorSpec):
        return dict(origin=(0, 0, 0), region=image_extent(spec))

    def upload(self, spec: TensorSpec, array: np.ndarray) -> None:
        # Not ascontiguousarray: it makes a scalar (a rank-0 input) 1-D.
        array = np.asarray(array, dtype=spec.dtype, order="C")
        if array.shape != spec.shape:
            raise TexscopeError(f"tensor {spec.name}: expected shape {list(spec.shape)}, "
                                f"got {list(array.shape)}")
        memory = self.allocate(spec)
        if spec.is_texture:
            self.cl.enqueue_copy(self.queue, memory, texels(array, spec), **self._region(spec))
        else:
            self.cl.enqueue_copy(self.queue, memory, array)

    @staticmethod
    def staged(spec: TensorSpec, array: np.ndarray) -> np.ndarray:
        """``array`` as :meth:`write` takes it for ``spec``: its values, or
        its :func:`texels` for an image."""
        return texels(array, spec) if spec.is_texture else array

    def write(self, spec: TensorSpec, host: np.ndarray):
        """Non-blocking write of ``host`` (:meth:`staged`) into ``spec``'s
        allocated memory; the caller keeps ``host`` alive until the queue
        finishes."""
        memory = self.objects[spec]
        if spec.is_texture:
            return self.cl.enqueue_copy(self.queue, memory, host, is_blocking=False,
                                        **self._region(spec))
        return self.cl.enqueue_copy(self.queue, memory, host, is_blocking=False)

    def read(self, spec: TensorSpec, out: np.ndarray):
        """Non-blocking read of ``spec`` into ``out`` (of its shape): valid
        once the queue finishes."""
        memory = self.objects[spec]
        if spec.is_texture:
            return self.cl.enqueue_copy(self.queue, texels(out, spec), memory,
                                        is_blocking=False, **self._region(spec))
        return self.cl.enqueue_copy(self.queue, out, memory, is_blocking=False)

    def download(self, spec: TensorSpec) -> np.ndarray:
        out = np.empty(spec.shape, dtype=spec.dtype)
        memory = self.objects[spec]
        if spec.is_texture:
            host = texels(out, spec)
            self.cl.enqueue_copy(self.queue, host, memory, **self._region(spec))
            out = host.reshape(spec.shape)
        else:
            self.cl.enqueue_copy(self.queue, out, memory)
        self.queue.finish()
        return out

    def copy(self, source: TensorSpec, target: TensorSpec):
        """Device-side copy between storages; returns the OpenCL event."""
        return self.copier(source, target)()

    def copier(self, source: TensorSpec, target: TensorSpec):
        """A callable enqueuing the copy of ``source`` into ``target`` (both
        allocated now) and returning its event: the memory objects, regions
        and any staging buffer resolved once."""
        if source.shape != target.shape or source.dtype != target.dtype:
            raise TexscopeError(f"copy {source.name} -> {target.name}: shapes or types differ")
        src, dst = self.allocate(source), self.allocate(target)
        enqueue = functools.partial(self.cl.enqueue_copy, self.queue, dst, src)
        if source.is_texture and target.is_texture:
            if source.scope == target.scope:
                return functools.partial(enqueue, src_origin=(0, 0, 0), dest_origin=(0, 0, 0),
                                         region=image_extent(source))
            # Different flavours fold the axes differently: go through a buffer.
            staging = TensorSpec(f"{source.name}->{target.name}", source.shape, source.dtype,
                                 BUFFER_SCOPE)
            first, second = self.copier(source, staging), self.copier(staging, target)
            return lambda: (first(), second())[1]
        if source.is_texture:
            return functools.partial(enqueue, offset=0, **self._region(source))
        if target.is_texture:
            return functools.partial(enqueue, offset=0, **self._region(target))
        return functools.partial(enqueue, byte_count=src.size)
