"""Memory scopes and how a texture scope folds a tensor into an image.

Kept free of TVM: the portable replay (``texscope.opencl.replay``) needs it on
machines where only numpy and pyopencl are installed.

A texture holds a 5-D packed tensor ``[d0, d1, d2, d3, 4]``; the last axis is
the RGBA texel.  Each *flavour* (a TVM memory scope) folds the four outer axes
into an image array of ``layers x height x width`` texels in its own way.
"""

from __future__ import annotations

import math

BUFFER_SCOPE = "global"

# Which outer axes of [d0, d1, d2, d3, 4] multiply into (layers, height, width),
# matching TVM's texture flattening for each scope (s_tir/dlight/adreno/utils.py).
FLAVOUR_AXES: dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = {
    "global.texture-weight": ((), (0,), (1, 2, 3)),
    "global.texture-nhwc": ((0,), (1,), (2, 3)),
    "global.texture": ((0, 1), (2,), (3,)),
}
TEXEL_LANES = 4


def is_texture_scope(scope) -> bool:
    """Whether a memory scope is a texture one (as TVM's IsTextureStorage decides)."""
    return "texture" in str(scope)


def is_packed_texel_shape(shape) -> bool:
    """Whether a static shape can be a texture: 5-D with an inner axis of one texel."""
    return len(shape) == 5 and shape[-1] == TEXEL_LANES


def image_extent(shape, flavour: str) -> tuple[int, int, int]:
    """``(layers, height, width)`` in texels of a packed ``shape`` held in ``flavour``.

    Raises
    ------
    KeyError
        ``flavour`` is not one of :data:`FLAVOUR_AXES`.
    """
    return tuple(math.prod(shape[axis] for axis in group) for group in FLAVOUR_AXES[flavour])


def image_bytes(shape, itemsize: int, flavour: str, row_alignment: int) -> int:
    """Bytes of the buffer an image of a packed ``shape`` is made from.

    An image made from a buffer (``cl_khr_image2d_from_buffer``, how TVM's
    OpenCL runtime views a planned storage as an image) starts every row at a
    multiple of ``row_alignment`` bytes: a row of ``width`` RGBA texels takes
    ``width * 4 * itemsize`` bytes rounded up to it, and the image takes
    ``layers * height`` such rows (TVM's ``GetTextureMemorySize``).

    Parameters
    ----------
    shape : sequence of int
        A packed texel shape ``[d0, d1, d2, d3, 4]``.
    itemsize : int
        Bytes of one channel value (4 for float32).
    flavour : str
        A texture scope of :data:`FLAVOUR_AXES`.
    row_alignment : int
        The target's ``image_base_address_alignment`` in bytes.
    """
    layers, height, width = image_extent(shape, flavour)
    row = width * TEXEL_LANES * itemsize
    return layers * height * (-(-row // row_alignment) * row_alignment)


def describe_flavour(scope: str) -> str:
    """How a flavour folds ``[d0, d1, d2, d3, 4]`` into an image array, in words."""
    if scope not in FLAVOUR_AXES:
        return f"{scope}: a plain buffer (linear memory)" if not is_texture_scope(scope) else scope
    layers, height, width = ("·".join(f"d{a}" for a in axes) or "1" for axes in FLAVOUR_AXES[scope])
    return (f"{scope}: the 5-D tensor [d0, d1, d2, d3, 4] is an image array of {layers} "
            f"layer(s) of {height} rows x {width} texels, each texel the 4 values of the "
            "last axis (RGBA); the name is TVM's, any tensor that fits may use it")
