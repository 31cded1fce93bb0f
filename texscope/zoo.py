"""Example networks, built with the BlockBuilder, small enough for a CPU.

Every builder returns an IRModule whose ``main`` takes the input first, then
the weights (created as the network is emitted), NCHW float32.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tvm
from tvm import relax
from tvm.relax import op as O

from . import examples


class _Net:
    def __init__(self, bb: relax.BlockBuilder, shape):
        self.bb = bb
        self.params = [relax.Var("x", relax.TensorType(shape, "float32"))]

    @property
    def x(self) -> relax.Var:
        return self.params[0]

    def emit(self, expr) -> relax.Var:
        return self.bb.emit(expr)

    def param(self, name: str, shape) -> relax.Var:
        var = relax.Var(name, relax.TensorType(shape, "float32"))
        self.params.append(var)
        return var

    def conv(self, h, name, out_channels, kernel=3, stride=1, groups=1) -> relax.Var:
        in_channels = int(h.ty.shape.values[1])
        w = self.param(name, (out_channels, in_channels // groups, kernel, kernel))
        return self.emit(O.nn.conv2d(h, w, strides=stride, padding=kernel // 2, groups=groups))

    def batch_norm(self, h, name) -> relax.Var:
        channels = int(h.ty.shape.values[1])
        gamma, beta, mean, var = (
            self.param(f"{name}_{p}", (channels,)) for p in ("gamma", "beta", "mean", "var")
        )
        return self.emit(O.nn.batch_norm(h, gamma, beta, mean, var, axis=1)[0])

    def dense(self, h, name, classes) -> relax.Var:
        features = int(h.ty.shape.values[1])
        return self.emit(O.matmul(h, self.param(name, (features, classes))))


def _network(input_shape, body: Callable[[_Net], relax.Expr]) -> tvm.IRModule:
    bb = relax.BlockBuilder()
    net = _Net(bb, input_shape)
    with bb.function("main"):
        with bb.dataflow():
            out = bb.emit_output(body(net))
        bb.emit_func_output(out, params=net.params)
    return bb.get()


def resnet_style(blocks: int = 4, channels: int = 32, image: int = 56, batch: int = 1):
    """A ResNet-style stack: stem, residual basic blocks with batch norm, head.

    Parameters
    ----------
    blocks : int
        Residual basic blocks (conv-bn-relu-conv-bn, skip add, relu).
    channels : int
        Channels after the stem.
    image : int
        Input height and width.
    batch : int
        Batch size.
    """

    def body(net):
        h = net.conv(net.x, "stem", channels, kernel=3, stride=2)
        h = net.emit(O.nn.relu(net.batch_norm(h, "stem_bn")))
        h = net.emit(O.nn.max_pool2d(h, pool_size=3, strides=2, padding=1))
        for i in range(blocks):
            skip = h
            h = net.emit(O.nn.relu(net.batch_norm(net.conv(h, f"b{i}_conv1", channels), f"b{i}_bn1")))
            h = net.batch_norm(net.conv(h, f"b{i}_conv2", channels), f"b{i}_bn2")
            h = net.emit(O.nn.relu(O.add(h, skip)))
        pooled = net.emit(O.mean(h, axis=[2, 3]))
        return net.dense(pooled, "fc", 10)

    return _network((batch, 3, image, image), body)


def conv_chain(length: int = 64, channels: int = 32, image: int = 28, residual_every: int = 4):
    """``length`` 3x3 conv + relu, with a residual add every ``residual_every`` convs."""

    def body(net):
        h = skip = net.x
        for i in range(length):
            h = net.emit(O.nn.relu(net.conv(h, f"w{i}", channels)))
            if (i + 1) % residual_every == 0:
                h = skip = net.emit(O.add(h, skip))
        return h

    return _network((1, channels, image, image), body)


def mobilenet_v2_style(blocks: int = 3, channels: int = 16, image: int = 56):
    """MobileNetV2-style inverted residuals: 1x1 expand + relu6, 3x3 depthwise
    + relu6, 1x1 project, skip add; adaptive average pool and a dense head."""

    def relu6(h):
        return O.clip(h, 0.0, 6.0)

    def body(net):
        h = net.emit(relu6(net.conv(net.x, "stem", channels, stride=2)))
        for i in range(blocks):
            skip = h
            e = net.emit(relu6(net.conv(h, f"b{i}_expand", channels * 4, kernel=1)))
            d = net.emit(relu6(net.conv(e, f"b{i}_dw", channels * 4, groups=channels * 4)))
            h = net.emit(O.add(net.conv(d, f"b{i}_project", channels, kernel=1), skip))
        pooled = net.emit(O.nn.adaptive_avg_pool2d(h, output_size=(1, 1)))
        return net.dense(net.emit(O.reshape(pooled, (1, channels))), "fc", 10)

    return _network((1, 3, image, image), body)


def unet_style(depth: int = 2, channels: int = 16, image: int = 64):
    """A small U-Net: conv encoders with average-pool downsampling, nearest
    upsampling, concatenation with the skip along channels, conv decoders."""

    def body(net):
        h = net.emit(O.nn.relu(net.conv(net.x, "in", channels)))
        skips = []
        for i in range(depth):
            skips.append(h)
            h = net.emit(O.nn.avg_pool2d(h, pool_size=2, strides=2))
            h = net.emit(O.nn.relu(net.conv(h, f"down{i}", channels)))
        for i, skip in enumerate(reversed(skips)):
            size = [int(d) for d in skip.ty.shape.values[2:]]
            up = net.emit(O.image.resize2d(h, size, method="nearest_neighbor"))
            h = net.emit(O.concat([up, skip], axis=1))
            h = net.emit(O.nn.relu(net.conv(h, f"up{i}", channels)))
        return net.conv(h, "out", 4, kernel=1)

    return _network((1, 4, image, image), body)


def inception_block(channels: int = 32, image: int = 28):
    """One tensor read four ways: by a conv, a max pool, a channel softmax and a split."""

    def body(net):
        t = net.emit(O.nn.relu(net.conv(net.x, "stem", channels)))
        a = net.conv(t, "branch", channels)
        b = net.emit(O.nn.max_pool2d(t, pool_size=3, strides=1, padding=1))
        c = net.emit(O.nn.softmax(t, axis=1))
        halves = net.emit(O.split(t, 2, axis=1))
        d = net.emit(O.concat([relax.TupleGetItem(halves, 1), relax.TupleGetItem(halves, 0)], axis=1))
        return net.emit(relax.Tuple([a, b, c, d]))

    return _network((1, channels, image, image), body)


NETWORKS: dict[str, Callable[[], tvm.IRModule]] = {
    "seed": lambda: examples.Seed,
    "resnet": resnet_style,
    "mobilenet_v2": mobilenet_v2_style,
    "unet": unet_style,
    "inception": inception_block,
    "chain64": lambda: conv_chain(64),
    "chain256": lambda: conv_chain(256),
    "chain1024": lambda: conv_chain(1024),
}


def random_inputs(mod: tvm.IRModule, seed: int = 0) -> list[np.ndarray]:
    """Random float32 arrays for main's parameters."""
    rng = np.random.default_rng(seed)
    return [
        rng.uniform(-1, 1, [int(d) for d in p.ty.shape.values]).astype("float32")
        for p in mod["main"].params
    ]
