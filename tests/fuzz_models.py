"""Random valid Relax modules for the fuzzer.

A recipe is a list of steps over a pool of live NCHW tensors; each step reads
one or two tensors of the pool (so a tensor may get several consumers of
different kinds) and adds its results.  Whatever no step reads is returned.
Recipes are plain tuples so hypothesis can shrink and print them.

A ``broadcast`` step convolves a tensor, views the result at rank 0 to 4 and
combines it with an operand of rank 0 to 4 (in either order) whose extents
are the result's trailing ones or 1: every pair of ranks after a conv, as
TVM's Adreno tests and TFLite biases write them.  Its operand may be a
parameter declared with a rank only (``build(recipe, open_inputs=True)``).
"""

import numpy as np
from hypothesis import strategies as st
from tvm import relax
from tvm.relax import op as O

# Convs, pools and reductions are listed twice: a tensor read by both a
# texture-only and a buffer-only kernel is where copies happen.
UNARY = ["conv", "conv", "depthwise", "relu", "bias_add", "max_pool", "max_pool", "avg_pool",
         "softmax", "mean", "mean", "layer_norm", "matmul", "reshape", "split", "broadcast",
         "broadcast"]
BROADCAST_OPS = [O.add, O.multiply, O.subtract]
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


def broadcast_step(activation_rank, operand_rank, operand_first=False, op=0, ones=0,
                   constant=False, rank_only=False):
    """The ``second`` of a broadcast step, from what it chooses: the ranks of
    the conv's view and of the operand, their order, the operator (an index
    of BROADCAST_OPS), which of the operand's extents are 1 (a bit each,
    from its first axis), a constant or a parameter (of rank only)."""
    return (operand_rank + 5 * activation_rank + 25 * operand_first + 50 * op + 150 * ones
            + 2400 * (not rank_only))


class _Builder:
    def __init__(self, recipe, seed=0, open_inputs=False):
        self.recipe = recipe
        self.rng = np.random.default_rng(seed)
        self.open_inputs = open_inputs
        self.params = []
        self.pool = []  # live tensors
        self.read = set()
        self.outputs = []  # results that cannot join the pool
        self.input_shapes = {}  # of parameters declared with a rank only

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

    def broadcast(self, bb, i, a, second, constant):
        n, c, h, w = self.shape(a)
        weight = self.weight(f"w{i}", (c, c, 3, 3), constant, c * 9)
        conv = bb.emit(O.nn.conv2d(a, weight, padding=1))
        operand_rank, activation_rank = second % 5, (second // 5) % 5
        operand_first, op = (second // 25) % 2, BROADCAST_OPS[(second // 50) % 3]
        ones, rank_only = (second // 150) % 16, (second // 2400) % 4 == 0
        views = {4: [n, c, h, w], 3: [c, h, w], 2: [c * h, w], 1: [c * h * w], 0: []}
        view = views[activation_rank]
        activation = conv if activation_rank == 4 else bb.emit(
            O.sum(conv) if activation_rank == 0 else O.reshape(conv, view))
        # A scalar view broadcasts to the operand: it takes the conv's extents.
        padded = [1] * max(operand_rank - activation_rank, 0) + (view or [n, c, h, w])
        shape = [1 if ones >> axis & 1 else extent
                 for axis, extent in enumerate(padded[len(padded) - operand_rank:])]
        result = (shape if activation_rank == 0
                  else [1] * max(operand_rank - activation_rank, 0) + view)
        name = f"b{i}"
        if not constant and rank_only and self.open_inputs:
            operand = relax.Var(name, relax.TensorType(ndim=operand_rank, dtype="float32"))
            self.params.append(operand)
            self.input_shapes[name] = shape
        else:
            operand = self.weight(name, tuple(shape), constant)
        out = bb.emit(op(operand, activation) if operand_first else op(activation, operand))
        # A rank-only operand leaves the result's shape unknown until run
        # time: an output then, not a map the next steps size themselves by
        # (so too where the operand is given its shape, to build alike).
        if (rank_only and not constant) or int(np.prod(result, dtype=np.int64)) != n * c * h * w:
            self.outputs.append(out)
            return []
        return [out if result == [n, c, h, w] else bb.emit(O.reshape(out, (n, c, h, w)))]

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
        elif kind == "broadcast":
            return self.broadcast(bb, i, a, second, constant)
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
                unread = [v for v in self.pool[1:] if v not in self.read] + self.outputs or [x]
                out = bb.emit_output(relax.Tuple(unread) if len(unread) > 1 else unread[0])
            bb.emit_func_output(out, params=self.params)
        return bb.get()


def build(recipe, open_inputs=False):
    """The Relax module a recipe describes; with ``open_inputs``, the
    operands of broadcast steps drawn so are parameters of rank only."""
    return _Builder(recipe, open_inputs=open_inputs).build()


def input_shapes(recipe) -> dict:
    """The shapes of the parameters ``build(recipe, open_inputs=True)``
    declares with a rank only, by name."""
    builder = _Builder(recipe, open_inputs=True)
    builder.build()
    return builder.input_shapes
