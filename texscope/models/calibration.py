"""Small modules that isolate one kernel class each, for calibration.

``texscope calibrate --export-kernels`` builds each of them three times (the
class's operands in buffers, its input in a texture, its output in a
texture) and ``texscope calibrate --kernels`` times the class's own kernels
on the device: the kernels texscope's builds run, not microbenchmarks.

The calls whose kernels are timed are bound to variables named
``measured...``; every other call only feeds them (stage 1's packing
transforms, a conv that makes a packed input for a pool).  Each module is
NCHW float32 and packs through stage 1 as a network does, except the
element-wise one, whose operands are packed parameters: an element-wise
call after a kernel fuses into it, and one before an unpack fuses with the
unpack.
"""

from __future__ import annotations

from collections.abc import Callable

import tvm
from tvm import relax
from tvm.relax import op as O

MEASURED = "measured"  # the prefix of the bindings whose kernels are timed
LANES = 4


def _tensor(name: str, shape) -> relax.Var:
    return relax.Var(name, relax.TensorType(shape, "float32"))


def _module(params, body: Callable[[relax.BlockBuilder], relax.Expr]) -> tvm.IRModule:
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            output = bb.emit_output(body(bb))
        bb.emit_func_output(output)
    return bb.get()


def packed_conv(channels: int, size: int) -> tvm.IRModule:
    """A 3x3 same-padding conv, ``channels`` in and out."""
    x, w = _tensor("x", (1, channels, size, size)), _tensor("w", (channels, channels, 3, 3))
    return _module([x, w], lambda bb: bb.emit(O.nn.conv2d(x, w, padding=(1, 1)), MEASURED))


def pointwise_conv(channels: int, size: int) -> tvm.IRModule:
    """A 1x1 conv, ``channels`` in and out."""
    x, w = _tensor("x", (1, channels, size, size)), _tensor("w", (channels, channels, 1, 1))
    return _module([x, w], lambda bb: bb.emit(O.nn.conv2d(x, w), MEASURED))


def depthwise_conv(channels: int, size: int) -> tvm.IRModule:
    """A 3x3 depthwise conv."""
    x, w = _tensor("x", (1, channels, size, size)), _tensor("w", (channels, 1, 3, 3))
    return _module([x, w], lambda bb: bb.emit(
        O.nn.conv2d(x, w, padding=(1, 1), groups=channels), MEASURED))


def pool(channels: int, size: int) -> tvm.IRModule:
    """A 3x3 stride-2 max pool of a 1x1 conv's output (a pool alone is not
    packed: stage 1 packs from convs)."""
    x, w = _tensor("x", (1, channels, size, size)), _tensor("w", (channels, channels, 1, 1))

    def body(bb):
        made = bb.emit(O.nn.conv2d(x, w), "producer")
        return bb.emit(O.nn.max_pool2d(made, (3, 3), (2, 2), padding=(1, 1)), MEASURED)

    return _module([x, w], body)


def elementwise(channels: int, size: int) -> tvm.IRModule:
    """The sum of two packed tensors."""
    shape = (1, channels // LANES, size, size, LANES)
    x, y = _tensor("x", shape), _tensor("y", shape)
    # A tuple output keeps the binding's name (a lone result would be bound
    # to the function's output variable instead).
    return _module([x, y], lambda bb: relax.Tuple([bb.emit(O.add(x, y), MEASURED)]))


def layout_transform(channels: int, size: int) -> tvm.IRModule:
    """A pack (NCHW to NCHW4c: its write is what a texture output changes)
    and an unpack (its read is what a texture input changes)."""
    plain, packed = (_tensor("x", (1, channels, size, size)),
                     _tensor("y", (1, channels // LANES, size, size, LANES)))

    def body(bb):
        pack = bb.emit(O.layout_transform(
            plain, index_map=lambda n, c, h, w: (n, c // LANES, h, w, c % LANES)), MEASURED)
        unpack = bb.emit(O.layout_transform(
            packed, index_map=lambda n, c, h, w, lane: (n, c * LANES + lane, h, w)),
            MEASURED + "_unpack")
        return relax.Tuple([pack, unpack])

    return _module([plain, packed], body)


# Per cost class of the registry, the module that isolates its kernels.
# (layer_norm, which writes only buffers, keeps calibrate's microbenchmark;
# pointwise_conv has none: a profile of microbenchmarks prices it as
# packed_conv, texscope.knowledge.profile.PRICED_AS.)
MODULES: dict[str, Callable[[int, int], tvm.IRModule]] = {
    "packed_conv": packed_conv,
    "pointwise_conv": pointwise_conv,
    "depthwise_conv": depthwise_conv,
    "pool": pool,
    "elementwise": elementwise,
    "layout_transform": layout_transform,
}
