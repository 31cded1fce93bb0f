"""Example networks for texture scoping, built with the BlockBuilder.

Every builder returns an IRModule whose ``main`` has one dataflow block and
takes the input first, then the weights in the order the network reads them.
All tensors are float32 and NCHW; at the default sizes each compiles and
runs on a CPU in about a second.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import tvm
from tvm import relax
from tvm.relax import op as O

from . import examples


def _dims(expr: relax.Expr) -> list[int]:
    return [int(d) for d in expr.ty.shape.values]


class _Net:
    """Emits the layers of one network and collects its parameters."""

    def __init__(self, bb: relax.BlockBuilder, input_shape: Sequence[int]):
        self.bb = bb
        self.params = [relax.Var("x", relax.TensorType(input_shape, "float32"))]

    @property
    def x(self) -> relax.Var:
        return self.params[0]

    def emit(self, expr: relax.Expr) -> relax.Var:
        return self.bb.emit(expr)

    def param(self, name: str, shape: Sequence[int]) -> relax.Var:
        var = relax.Var(name, relax.TensorType(shape, "float32"))
        self.params.append(var)
        return var

    def conv(self, h, name, out_channels, kernel=3, stride=1, groups=1) -> relax.Var:
        """Same-padding conv2d with a new OIHW weight parameter."""
        in_channels = _dims(h)[1]
        w = self.param(name, (out_channels, in_channels // groups, kernel, kernel))
        return self.emit(O.nn.conv2d(h, w, strides=stride, padding=kernel // 2, groups=groups))

    def batch_norm(self, h, name) -> relax.Var:
        """Inference batch norm over channels, its statistics as 1-D parameters."""
        channels = _dims(h)[1]
        gamma, beta, mean, var = (
            self.param(f"{name}_{p}", (channels,)) for p in ("gamma", "beta", "mean", "var")
        )
        return self.emit(O.nn.batch_norm(h, gamma, beta, mean, var, axis=1)[0])

    def dense(self, h, name, classes) -> relax.Var:
        """``h @ w`` with a new (features, classes) weight parameter."""
        features = _dims(h)[1]
        return self.emit(O.matmul(h, self.param(name, (features, classes))))


def _network(input_shape: Sequence[int], body: Callable[[_Net], relax.Expr]) -> tvm.IRModule:
    bb = relax.BlockBuilder()
    net = _Net(bb, input_shape)
    with bb.function("main"):
        with bb.dataflow():
            out = bb.emit_output(body(net))
        bb.emit_func_output(out, params=net.params)
    # The last layer was emitted before it was known to be the output: fold
    # the ``gv = lv`` alias that emit_output added.
    return relax.transform.CanonicalizeBindings()(bb.get())


def _relu6(h: relax.Expr) -> relax.Expr:
    return O.clip(h, 0.0, 6.0)


def resnet_style(
    blocks: int = 4, channels: int = 32, image: int = 56, batch: int = 1
) -> tvm.IRModule:
    """A ResNet-style classifier with batch norm.

    A stride-2 3x3 stem conv, batch norm, relu and a stride-2 max pool; then
    basic blocks (conv-bn-relu-conv-bn, skip add, relu); then a mean over H
    and W and a dense layer to 10 classes.

    Parameters
    ----------
    blocks : int
        Number of residual basic blocks.
    channels : int
        Channels of the stem output and of every block.
    image : int
        Input height and width.
    batch : int
        Batch size.

    Returns
    -------
    tvm.IRModule
        ``main(x: (batch, 3, image, image), weights...) -> (batch, 10)``.
    """

    def body(net: _Net) -> relax.Expr:
        h = net.conv(net.x, "stem", channels, stride=2)
        h = net.emit(O.nn.relu(net.batch_norm(h, "stem_bn")))
        h = net.emit(O.nn.max_pool2d(h, pool_size=3, strides=2, padding=1))
        for i in range(blocks):
            skip = h
            h = net.batch_norm(net.conv(h, f"b{i}_conv1", channels), f"b{i}_bn1")
            h = net.emit(O.nn.relu(h))
            h = net.batch_norm(net.conv(h, f"b{i}_conv2", channels), f"b{i}_bn2")
            h = net.emit(O.nn.relu(O.add(h, skip)))
        pooled = net.emit(O.mean(h, axis=[2, 3]))
        return net.dense(pooled, "fc", 10)

    return _network((batch, 3, image, image), body)


def conv_chain(
    length: int = 64, channels: int = 32, image: int = 28, residual_every: int = 4
) -> tvm.IRModule:
    """A long chain of 3x3 same-padding conv2d + relu with periodic residual adds.

    Parameters
    ----------
    length : int
        Number of convs; 1024 still builds in about a second.
    channels : int
        Channels of the input and of every conv.
    image : int
        Input height and width.
    residual_every : int
        After every this many convs, the chain adds the tensor it had at the
        previous add (or the input).

    Returns
    -------
    tvm.IRModule
        ``main(x: (1, channels, image, image), w0, ..., w{length-1})``, same
        shape out as in.
    """

    def body(net: _Net) -> relax.Expr:
        h = skip = net.x
        for i in range(length):
            h = net.emit(O.nn.relu(net.conv(h, f"w{i}", channels)))
            if (i + 1) % residual_every == 0:
                h = skip = net.emit(O.add(h, skip))
        return h

    return _network((1, channels, image, image), body)


def mobilenet_v2_style(blocks: int = 3, channels: int = 16, image: int = 56) -> tvm.IRModule:
    """A MobileNetV2-style classifier of inverted residual blocks.

    A stride-2 stem conv + relu6, then blocks of a 1x1 expand (x4) + relu6, a
    3x3 depthwise conv + relu6 and a linear 1x1 project; then an adaptive
    average pool to 1x1 and a dense layer to 10 classes.  As in MobileNetV2
    the first block downsamples, so only the later blocks, whose input and
    output shapes match, add a skip.

    Parameters
    ----------
    blocks : int
        Number of inverted residual blocks.
    channels : int
        Channels between blocks; the expanded ones have four times as many.
    image : int
        Input height and width.

    Returns
    -------
    tvm.IRModule
        ``main(x: (1, 3, image, image), weights...) -> (1, 10)``.
    """
    expanded = channels * 4

    def body(net: _Net) -> relax.Expr:
        h = net.emit(_relu6(net.conv(net.x, "stem", channels, stride=2)))
        for i in range(blocks):
            stride = 2 if i == 0 else 1
            e = net.emit(_relu6(net.conv(h, f"b{i}_expand", expanded, kernel=1)))
            d = net.emit(_relu6(net.conv(e, f"b{i}_dw", expanded, stride=stride, groups=expanded)))
            p = net.conv(d, f"b{i}_project", channels, kernel=1)
            h = net.emit(O.add(p, h)) if _dims(p) == _dims(h) else p
        pooled = net.emit(O.nn.adaptive_avg_pool2d(h, output_size=(1, 1)))
        return net.dense(net.emit(O.reshape(pooled, (1, channels))), "fc", 10)

    return _network((1, 3, image, image), body)


def unet_style(depth: int = 2, channels: int = 16, image: int = 64) -> tvm.IRModule:
    """A small U-Net.

    Each encoder level average-pools by 2 and convs; each decoder level
    upsamples by 2 (nearest), concatenates the encoder tensor of the same size
    along channels and convs.  A 1x1 conv gives 4 output channels.

    Parameters
    ----------
    depth : int
        Number of downsampling (and upsampling) levels; ``image`` must be
        divisible by ``2 ** depth``.
    channels : int
        Channels of every conv but the last.
    image : int
        Input height and width.

    Returns
    -------
    tvm.IRModule
        ``main(x: (1, 3, image, image), weights...) -> (1, 4, image, image)``.
    """

    def body(net: _Net) -> relax.Expr:
        h = net.emit(O.nn.relu(net.conv(net.x, "in", channels)))
        skips = []
        for i in range(depth):
            skips.append(h)
            h = net.emit(O.nn.avg_pool2d(h, pool_size=2, strides=2))
            h = net.emit(O.nn.relu(net.conv(h, f"down{i}", channels)))
        for i, skip in enumerate(reversed(skips)):
            up = net.emit(O.image.resize2d(h, _dims(skip)[2:], method="nearest_neighbor"))
            h = net.emit(O.concat([up, skip], axis=1))
            h = net.emit(O.nn.relu(net.conv(h, f"up{i}", channels)))
        return net.conv(h, "out", 4, kernel=1)

    return _network((1, 3, image, image), body)


def inception_block(channels: int = 32, image: int = 28) -> tvm.IRModule:
    """One conv output read four ways: a conv, a max pool, a softmax and a split.

    The consumers read the shared tensor in different ways (sliding windows,
    a reduction over channels, a channel slice): the fan-out case a scoping
    pass has to settle.

    Parameters
    ----------
    channels : int
        Channels of the input and of the shared tensor; must be even.
    image : int
        Input height and width.

    Returns
    -------
    tvm.IRModule
        ``main(x: (1, channels, image, image), stem, branch)`` returning the
        tuple (conv, max pool, softmax, sum of the two split halves).
    """

    def body(net: _Net) -> relax.Expr:
        shared = net.conv(net.x, "stem", channels)
        conv = net.conv(shared, "branch", channels)
        pool = net.emit(O.nn.max_pool2d(shared, pool_size=3, strides=1, padding=1))
        softmax = net.emit(O.nn.softmax(shared, axis=1))
        halves = net.emit(O.split(shared, 2, axis=1))
        halves_sum = net.emit(O.add(halves[0], halves[1]))
        return relax.Tuple([conv, pool, softmax, halves_sum])

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


def with_constant_weights(mod: tvm.IRModule, seed: int = 0) -> tvm.IRModule:
    """``mod`` with every parameter of ``main`` but the first bound to random
    constant weights (normal, scaled by 1/sqrt(fan-in)), as a deployed model
    holds them."""
    rng = np.random.default_rng(seed)
    weights = {}
    for param in mod["main"].params[1:]:
        shape = [int(d) for d in param.ty.shape.values]
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        weights[param.name] = (rng.standard_normal(shape) / np.sqrt(fan_in)).astype("float32")
    return relax.transform.BindParams("main", weights)(mod)


def with_declared_weights(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with ``main`` declaring every parameter but the first a weight
    (TVM's ``num_input`` attribute), as ``texscope.build(...,
    lift_weights=True)`` needs."""
    return tvm.IRModule({gvar: func.with_attr("num_input", 1) if gvar.name_hint == "main" else func
                         for gvar, func in mod.functions.items()},
                        attrs=mod.attrs, global_infos=mod.global_infos)
