"""Random valid Relax modules for the fuzzer.

A recipe is a list of steps over a pool of live NCHW tensors; each step reads
one or two tensors of the pool (so a tensor may get several consumers of
different kinds) and adds its results.  Whatever no step reads is returned.
Recipes are plain tuples so hypothesis can shrink and print them.
"""

import numpy as np
from hypothesis import strategies as st
from tvm import relax
from tvm.relax import op as O

# Convs, pools and reductions are listed twice: a tensor read by both a
# texture-only and a buffer-only kernel is where copies happen.
UNARY = ["conv", "conv", "depthwise", "relu", "bias_add", "max_pool", "max_pool", "avg_pool",
         "softmax", "mean", "mean", "layer_norm", "matmul", "reshape", "split"]
BINARY = ["add", "concat"]


@st.composite
def recipes(draw, max_steps: int = 8):
    channels = draw(st.sampled_from([3, 4, 8]))  # 3: an RGB input, padded to 4
    # 80 rows exceed the tiny target's texture limits whatever the flavour.
    height = draw(st.sampled_from([4, 8, 80]))
    width = draw(st.sampled_from([4, 8]))
    steps = []
    for _ in range(draw(st.integers(1, max_steps))):
        kind = draw(st.sampled_from(UNARY + BINARY))
        first = draw(st.integers(0, 10**6))
        second = draw(st.integers(0, 10**6))
        constant = draw(st.booleans())
        steps.append((kind, first, second, constant))
    return (channels, height, width, tuple(steps))


class _Builder:
    def __init__(self, recipe, seed=0):
        self.recipe = recipe
        self.rng = np.random.default_rng(seed)
        self.params = []
        self.pool = []  # live tensors
        self.read = set()

    def weight(self, name, shape, constant, fan_in=None):
        """A parameter, or a constant uniform with variance 1 / fan-in (as
        verify.random_inputs draws weights)."""
        if constant:
            high = 1.0 if fan_in is None else (3.0 / fan_in) ** 0.5
            return relax.const(self.rng.uniform(-high, high, shape).astype("float32"))
        var = relax.Var(name, relax.TensorType(shape, "float32"))
        self.params.append(var)
        return var

    @staticmethod
    def shape(var):
        return [int(d) for d in var.ty.shape.values]

    def pick(self, index, like=None):
        candidates = [v for v in self.pool if like is None or self.shape(v) == self.shape(like)]
        chosen = candidates[index % len(candidates)]
        self.read.add(chosen)
        return chosen

    def step(self, bb, i, kind, first, second, constant):
        a = self.pick(first)
        n, c, h, w = self.shape(a)
        name = f"w{i}"
        if kind == "conv":
            out = O.nn.conv2d(a, self.weight(name, (4 * (1 + second % 2), c, 3, 3), constant, c * 9), padding=1)
        elif kind == "depthwise":
            out = O.nn.conv2d(a, self.weight(name, (c, 1, 3, 3), constant, 9), padding=1, groups=c)
        elif kind == "relu":
            out = O.nn.relu(a)
        elif kind == "bias_add":  # a 1-D parameter, broadcast over channels
            out = O.add(a, O.reshape(self.weight(name, (c,), constant), (1, c, 1, 1)))
        elif kind == "max_pool":
            out = O.nn.max_pool2d(a, pool_size=3, strides=1, padding=1)
        elif kind == "avg_pool":
            out = O.nn.avg_pool2d(a, pool_size=3, strides=1, padding=1)
        elif kind == "softmax":
            out = O.nn.softmax(a, axis=1)
        elif kind == "mean":
            out = O.mean(a, axis=[2, 3], keepdims=True)
        elif kind == "layer_norm":
            out = O.nn.layer_norm(a, self.weight(name + "g", (w,), constant),
                                  self.weight(name + "b", (w,), constant), axes=[-1])
        elif kind == "matmul":
            out = O.matmul(a, self.weight(name, (w, w), constant, w))
        elif kind == "reshape":
            out = O.reshape(a, (n, c, w, h))
        elif kind == "split" and c % 2 == 0:
            parts = bb.emit(O.split(a, 2, axis=1))
            return [bb.emit(relax.TupleGetItem(parts, j)) for j in range(2)]
        elif kind == "split":  # odd channels do not split in two
            out = O.nn.relu(a)
        elif kind == "add":
            out = O.add(a, self.pick(second, like=a))
        elif kind == "concat":
            out = O.concat([a, self.pick(second, like=a)], axis=1)
        return [bb.emit(out)]

    def build(self):
        channels, height, width, steps = self.recipe
        bb = relax.BlockBuilder()
        x = relax.Var("x", relax.TensorType((1, channels, height, width), "float32"))
        self.params.append(x)
        self.pool.append(x)
        with bb.function("main"):
            with bb.dataflow():
                for i, step in enumerate(steps):
                    self.pool.extend(self.step(bb, i, *step))
                unread = [v for v in self.pool[1:] if v not in self.read] or [x]
                out = bb.emit_output(relax.Tuple(unread) if len(unread) > 1 else unread[0])
            bb.emit_func_output(out, params=self.params)
        return bb.get()


def build(recipe):
    """The Relax module a recipe describes."""
    return _Builder(recipe).build()
