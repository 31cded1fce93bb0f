"""What each operator's kernel accepts, per operand and per output, as data.

The stages never test an operator by name: they ask :func:`support_for` what a
call accepts and act on the answer.  An entry matches either a Relax operator
call kept unlegalized by stage 1 (its attributes are still there), or a
legalized PrimFunc by its ``op_pattern``.  Users add entries with
:func:`register_op`; entries registered later take precedence.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence

import attrs
import tvm
import tvm_ffi
from tvm import relax

from .shapes import static_shape

# relay's OpPatternKind, as AnnotateTIROpPattern writes it on PrimFuncs.
PATTERN_INJECTIVE = 2
PATTERN_COMM_REDUCE = 3
PATTERN_OUT_ELEMWISE_FUSABLE = 4
PATTERN_OPAQUE = 8


class Storage(enum.Enum):
    """How a tensor is stored on the GPU."""

    BUFFER = "buffer"
    TEXTURE = "texture"


ANY = frozenset({Storage.TEXTURE, Storage.BUFFER})
TEXTURE = frozenset({Storage.TEXTURE})
BUFFER = frozenset({Storage.BUFFER})


def _repsets(value: Sequence[frozenset]) -> tuple[frozenset, ...]:
    return tuple(frozenset(v) for v in value)


OP_RECORD_ATTR = "texscope_op"

# Element-wise operators of two operands that broadcast as numpy does: stage 1
# gives their operands equal ranks so a 1-D bias does not keep a 4-D
# activation out of the packed layout (texscope.rewrites.broadcast_rank).
BROADCAST_BINARY_OPS = (
    "relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum",
    "relax.minimum", "relax.power",
)


@attrs.frozen
class LayoutRule:
    """How stage 1's layout conversion carries packed layouts through one
    operator: what TVM's ConvertLayout does with it (its ``FRelaxInferLayout``),
    which :mod:`texscope.rewrites.packed_layout` computes without building
    TVM layout objects.  Operators TVM gives no layout inference need no
    rule (their operands are unpacked); any other operator without a rule
    sends the module to TVM's pass.

    Parameters
    ----------
    kind : str
        ``"elementwise"``: the output in its first operand's layout.
        ``"broadcast"``: two operands of any ranks; the packed one's layout
        where the other's shape packs the same way.
        ``"desired"``: the layouts :func:`desired_layouts` asks (data,
        kernel, output), written into ``layout_attrs``, where both operands'
        shapes pack; else plain.
        ``"window"``: a packed input's layout kept where its shape packs,
        ``layout_attrs`` (input and output layout) named after it; else plain.
        ``"plain"``: a packed input unpacked; the output plain.
        ``"reduce"``: a reduction over ``axis_attr`` (all axes where None)
        follows its input's layout, packed or not; its axes are renumbered
        in that layout.
        ``"permute"``: a packed input unpacked; the order in ``axis_attr``
        written out (reversed where None).
        ``"join"``: one tuple operand, all its tensors in one layout (the
        first packed one's where none is plain, else the first plain one's);
        the axis in ``axis_attr`` renumbered in that layout.
        ``"split"``: the parts in the input's layout where each part's shape
        packs as the input does, else plain; ``axis_attr`` renumbered.
        ``"squeeze"``: a packed input unpacked; the squeezed axes in
        ``axis_attr`` written out in order (the unit axes where None).
        ``"normalize"``: the first operand's layout followed, packed or not,
        the other ``tensor_operands`` plain; the axes in ``axis_attr``
        renumbered in that layout.
    layout_attrs : tuple of str
        The attributes naming the layouts (``desired``, ``window``).
    axes_operand : int, optional
        For ``plain``: the operand holding a static tuple of axes, which
        the conversion writes back non-negative (as int64).
    axis_attr : str
        For ``plain``: the attribute holding one axis, written back
        non-negative; for ``reduce``: the one holding the reduced axes; for
        ``permute``: the one holding the order; for ``join`` and ``split``:
        the joined or split axis; for ``normalize``: the normalized axes;
        for ``squeeze``: the squeezed axes.
    tensor_operands : int
        For ``normalize``: how many operands are tensors.
    """

    kind: str
    layout_attrs: tuple[str, ...] = ()
    axes_operand: int | None = None
    axis_attr: str = ""
    tensor_operands: int = 1


_ELEMENTWISE_RULE = LayoutRule("elementwise")
_BROADCAST_RULE = LayoutRule("broadcast")
_CONV_LAYOUT_ATTRS = ("data_layout", "kernel_layout", "out_layout")

LAYOUT_RULES: Mapping[str, LayoutRule] = {
    **{op: _ELEMENTWISE_RULE for op in (
        "relax.nn.relu", "relax.astype", "relax.sigmoid", "relax.sqrt", "relax.rsqrt",
        "relax.tanh", "relax.exp", "relax.negative", "relax.abs", "relax.square",
    )},
    **{op: _BROADCAST_RULE for op in BROADCAST_BINARY_OPS},
    "relax.nn.conv2d": LayoutRule("desired", _CONV_LAYOUT_ATTRS),
    **{op: LayoutRule("window", ("layout", "out_layout")) for op in (
        "relax.nn.max_pool2d", "relax.nn.avg_pool2d", "relax.nn.adaptive_avg_pool2d",
    )},
    "relax.expand_dims": LayoutRule("plain"),
    "relax.image.resize2d": LayoutRule("plain"),
    "relax.strided_slice": LayoutRule("plain", axes_operand=1),
    "relax.nn.softmax": LayoutRule("plain", axis_attr="axis"),
    "relax.flip": LayoutRule("plain", axis_attr="axis"),
    "relax.squeeze": LayoutRule("squeeze", axis_attr="axis"),
    "relax.permute_dims": LayoutRule("permute", axis_attr="axes"),
    "relax.concat": LayoutRule("join", axis_attr="axis"),
    "relax.split": LayoutRule("split", axis_attr="axis"),
    "relax.nn.layer_norm": LayoutRule("normalize", axis_attr="axes", tensor_operands=3),
    **{op: LayoutRule("reduce", axis_attr="axis") for op in (
        "relax.mean", "relax.sum", "relax.max", "relax.min",
    )},
}


def recorded_op(call: relax.Call, mod: tvm.IRModule) -> tuple[str | None, Mapping]:
    """The operator behind a call and its attribute values.

    For a Relax operator call, its name and attributes; for a ``call_tir``,
    what stage 1 recorded on the PrimFunc it legalized to (``texscope_op``).
    """
    if not isinstance(call.op, tvm.ir.Op):
        return None, {}
    if call.op.name == "relax.call_tir":
        func = mod[call.args[0]]
        record = func.attrs.get(OP_RECORD_ATTR) if func.attrs else None
        if record is None:
            return None, {}
        return str(record["op"]), record
    return call.op.name, call.attrs


@attrs.frozen
class OpKey:
    """Matches calls of a Relax operator whose attributes have given values.

    The call may be the Relax call itself, or a ``call_tir`` whose PrimFunc
    stage 1 legalized from such a call.

    Parameters
    ----------
    op : str
        The operator, e.g. ``"relax.nn.max_pool2d"``.
    where : mapping of str to str
        Attribute values the call must have, compared as strings.
    unless : mapping of str to str
        Attribute values the call must not have.
    window : tuple of int, optional
        The window the call's weight (its second operand, ``OIHW`` or
        ``OIHW4o``) must span, its dims 2 and 3: ``(1, 1)`` for a pointwise
        conv.
    """

    op: str
    where: Mapping[str, str] = attrs.field(factory=dict, converter=dict)
    unless: Mapping[str, str] = attrs.field(factory=dict, converter=dict)
    window: tuple[int, ...] | None = None

    def matches(self, call: relax.Call, mod: tvm.IRModule) -> bool:
        op, values = recorded_op(call, mod)
        if op != self.op:
            return False
        return (all(str(_get(values, k)) == v for k, v in self.where.items())
                and not any(str(_get(values, k)) == v for k, v in self.unless.items())
                and (self.window is None or weight_window(call) == self.window))

    def describe(self) -> str:
        cond = [f"{k}={v}" for k, v in self.where.items()]
        cond += [f"{k}!={v}" for k, v in self.unless.items()]
        if self.window is not None:
            cond.append(f"window={'x'.join(map(str, self.window))}")
        return f"{self.op}({', '.join(cond)})" if cond else self.op


def weight_window(call: relax.Call) -> tuple[int, ...] | None:
    """Dims 2 and 3 of a call's second tensor operand (a conv's weight, the
    Relax call's or its ``call_tir``'s), where static; else None."""
    args = call.args
    if isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.call_tir":
        args = args[1].fields if isinstance(args[1], relax.Tuple) else ()
    shape = static_shape(args[1].ty) if len(args) > 1 else None
    return shape[2:4] if shape is not None and len(shape) >= 4 else None


def _get(values, key: str):
    if isinstance(values, tvm.ir.Attrs):
        return getattr(values, key, None)
    return values.get(key) if key in values else None


def op_pattern_of(call: relax.Call, mod: tvm.IRModule) -> int:
    """The ``op_pattern`` of a ``call_tir``'s PrimFunc; opaque for anything else."""
    if isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.call_tir":
        func = mod[call.args[0]]
        if func.attrs and "op_pattern" in func.attrs:
            return int(func.attrs["op_pattern"])
    return PATTERN_OPAQUE


@attrs.frozen
class PatternKey:
    """Matches a ``call_tir`` whose PrimFunc's ``op_pattern`` is at most a bound."""

    max_pattern: int

    def matches(self, call: relax.Call, mod: tvm.IRModule) -> bool:
        return op_pattern_of(call, mod) <= self.max_pattern

    def describe(self) -> str:
        return f"op_pattern <= {self.max_pattern}"


def _stores(stmt):
    """Every BufferStore under a TIR statement."""
    if isinstance(stmt, tvm.tirx.BufferStore):
        yield stmt
        return
    for child_name in ("seq", "block", "body", "init", "then_case", "else_case"):
        child = getattr(stmt, child_name, None)
        if child is None:
            continue
        for item in child if isinstance(child, (list, tvm_ffi.Array)) else [child]:
            yield from _stores(item)


_IF_THEN_ELSE = tvm.ir.Op.get("prim.if_then_else")


def _loads_any(expr) -> bool:
    found = []
    tvm_ffi.structural_visit(expr, (tvm.ir.expr.TensorLoad, lambda load, _visitor: found.append(load)))
    return bool(found)


def moves_elements_only(func: tvm.tirx.PrimFunc) -> bool:
    """True for a kernel made of one store of a loaded element (or a pad value):
    a legalized layout transform, which AnnotateTIROpPattern calls opaque."""
    stores = list(_stores(func.body))
    if len(stores) != 1:
        return False
    value = stores[0].value
    if isinstance(value, tvm.ir.Call) and value.op.same_as(_IF_THEN_ELSE):
        condition, *branches = value.args
        return not _loads_any(condition) \
            and any(isinstance(arg, tvm.ir.expr.TensorLoad) for arg in branches)
    return isinstance(value, tvm.ir.expr.TensorLoad)


@attrs.frozen
class DataMovementKey:
    """Matches a ``call_tir`` of an unrecorded PrimFunc that only moves elements."""

    def matches(self, call: relax.Call, mod: tvm.IRModule) -> bool:
        if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.call_tir"):
            return False
        func = mod[call.args[0]]
        return isinstance(func, tvm.tirx.PrimFunc) and moves_elements_only(func)

    def describe(self) -> str:
        return "call_tir(moves elements only)"


def schedule_rules(func: tvm.tirx.PrimFunc) -> set[str]:
    """The ``schedule_rule`` annotations on a PrimFunc's blocks (TOPI tags
    its pools ``meta_schedule.pool_max`` / ``meta_schedule.pool_avg``)."""
    rules = set()

    def visit(value, visitor):
        if isinstance(value, tvm.s_tir.stmt.SBlock) and "schedule_rule" in value.annotations:
            rules.add(str(value.annotations["schedule_rule"]))
        visitor.default_visit(value)

    tvm_ffi.structural_visit(func.body, visit)
    return rules


@attrs.frozen
class ScheduleRuleKey:
    """Matches a ``call_tir`` of a PrimFunc with a block tagged with one of
    ``rules`` (TOPI tags its pools so, whoever legalized them).

    ``ops`` names the Relax operators whose legalizations carry those tags:
    not used to match, it says which operators the entry describes
    (``texscope ops``, the coverage tests).
    """

    rules: frozenset = attrs.field(converter=frozenset)
    ops: tuple[str, ...] = ()

    def matches(self, call: relax.Call, mod: tvm.IRModule) -> bool:
        if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.call_tir"):
            return False
        func = mod[call.args[0]]
        # Walking the TIR is the costly part: only reductions can be pools.
        return (isinstance(func, tvm.tirx.PrimFunc)
                and op_pattern_of(call, mod) in (PATTERN_COMM_REDUCE, PATTERN_OUT_ELEMWISE_FUSABLE)
                and bool(schedule_rules(func) & self.rules))

    def describe(self) -> str:
        described = f" ({', '.join(self.ops)})" if self.ops else ""
        return "call_tir(block tagged " + " or ".join(sorted(self.rules)) + ")" + described


@attrs.frozen
class ChannelPadding:
    """How stage 1 zero-pads an operator's channels to whole texels, so that
    it packs although its channel counts are not multiples of 4
    (:mod:`texscope.rewrites.pad_channels` does it).

    The operator reads its data as operand 0 and its kernel as operand 1.
    Ungrouped, it gets zero input channels in both and zero output channels
    in the kernel, which a slice of the result drops; grouped, whole zero
    groups are appended (and the group count raised).

    Parameters
    ----------
    layout_attrs : (str, str, str)
        The attributes naming the data, kernel and output layouts (an empty
        output layout is the data's).  Only plain layouts (upper-case axis
        letters, each once) are padded.
    channel : str
        The channel axis letter of the data and output layouts.
    kernel_out, kernel_in : str
        The kernel's output- and input-channel axis letters.
    groups : str
        The attribute holding the group count.
    """

    layout_attrs: tuple[str, str, str]
    channel: str = "C"
    kernel_out: str = "O"
    kernel_in: str = "I"
    groups: str = "groups"


@attrs.frozen
class OpSupport:
    """The storages one operator's kernel accepts.

    Parameters
    ----------
    name : str
        A short label used in reports.
    key : OpKey, PatternKey, DataMovementKey or ScheduleRuleKey
        Which calls the entry describes.
    inputs : tuple of frozenset of Storage
        Accepted storages per tensor operand; the last one repeats for any
        further operands.
    outputs : tuple of frozenset of Storage
        Storages the kernel can write, per output (tuple field); the last one
        repeats.
    desired_layouts : tuple of str, optional
        Layouts stage 1 asks ConvertLayout for (data, kernel, output).
    pack_when : mapping of str to str
        Attribute values the unconverted call must have for
        ``desired_layouts`` to apply.
    layout_attrs : tuple of str
        The call attributes holding its layouts, in ``desired_layouts``
        order: a call not packed keeps these explicitly (ConvertLayout would
        otherwise push its input's packed layout into it).
    cost_class : str or None
        The kernel class whose prices the cost profile gives (``packed_conv``,
        ``pointwise_conv``, ``depthwise_conv``, ``pool``, ``layer_norm``,
        ``elementwise``, ``layout_transform``; see
        :mod:`texscope.knowledge.profile`): what a texture read and a texture
        write by this kernel save.  ``texscope calibrate`` measures each class
        on a device.
    texture_gain : float
        What a texture read saves, as a fraction of the tensor's bytes, for
        an entry whose cost class the profile does not price (a user's own
        kernel, say): the planner weighs it against the bytes a copy moves.
        Negative where reading a texture costs more than reading a buffer:
        the planner then reads one only to save a copy.
    texture_write_gain : float
        Likewise for writing the output to a texture.
    sync : frozenset of str, optional
        Which of the kernel's tensors must share one storage: ``"inputs"``
        (all tensor inputs), ``"outputs"`` (all outputs), ``"primary"`` (the
        first input and the first output).  None infers them from the
        declaration as ExecuTorch's OpRepSet does: one input set means all
        inputs agree, one output set that all outputs agree, and equal first
        input and output sets that the primary input and output agree.
    keep_unlegalized : bool
        Stage 1 leaves the operator a Relax call (its legalization comes later
        in the build, and its type inference honours a VDevice in
        ``ty_args``); otherwise stage 1 legalizes it and records its
        attributes on the PrimFunc (see :func:`recorded_op`).
    legalization : str
        For a kept operator, the name of texscope's legalization of it (in
        :data:`texscope.rewrites.legalize.LEGALIZATIONS`), which the build
        runs in place of TVM's; empty for TVM's own.
    channel_padding : ChannelPadding, optional
        How stage 1 pads the operator's channels to multiples of 4 so that
        it packs.
    note : str
        Why the entry says what it says.

    Notes
    -----
    A tensor that cannot be a texture (wrong rank, symbolic shape, over the
    limits) is read and written as a buffer by every kernel, whatever its
    entry says: buffer is the universal fallback.
    """

    name: str
    key: OpKey | PatternKey | DataMovementKey | ScheduleRuleKey
    inputs: tuple[frozenset, ...] = attrs.field(converter=_repsets)
    outputs: tuple[frozenset, ...] = attrs.field(converter=_repsets)
    desired_layouts: tuple[str, ...] | None = None
    pack_when: Mapping[str, str] = attrs.field(factory=dict, converter=dict)
    layout_attrs: tuple[str, ...] = ()
    cost_class: str | None = None
    texture_gain: float = 0.0
    texture_write_gain: float = 0.0
    sync: frozenset | None = None
    keep_unlegalized: bool = False
    legalization: str = ""
    channel_padding: ChannelPadding | None = None
    note: str = ""

    def sync_rules(self) -> frozenset:
        """The sync rules, stated or inferred."""
        if self.sync is not None:
            return frozenset(self.sync)
        rules = set()
        if len(self.inputs) == 1:
            rules.add("inputs")
        if len(self.outputs) == 1:
            rules.add("outputs")
        if self.inputs and self.outputs and self.inputs[0] == self.outputs[0]:
            rules.add("primary")
        return frozenset(rules)

    def input(self, operand: int) -> frozenset:
        return self.inputs[min(operand, len(self.inputs) - 1)]

    def output(self, field: int) -> frozenset:
        return self.outputs[min(field, len(self.outputs) - 1)]


# TVM lowers each buffer of a TIR kernel in its own scope, so TVM's kernels
# need no sync between operands (ExecuTorch's Vulkan shaders do).
NO_SYNC = frozenset()

OPAQUE = OpSupport(
    name="opaque",
    key=PatternKey(PATTERN_OPAQUE),
    inputs=(BUFFER,),
    # A texel store takes 4 lanes; a generic schedule stores scalars. (TVM
    # 0.27 without texscope's store fix compiles such stores as broadcasts:
    # wrong values.)
    outputs=(BUFFER,),
    sync=NO_SYNC,
    note="no texture kernel is known for it: buffers only",
)

# And a layout transform's.  (The default profiles price a texture read by an
# unpack slightly negative: a tensor that is only unpacked stays a buffer, as
# the design's example has it, while an unpack still reads a texture that
# exists anyway rather than a copy of it.)
_LAYOUT_TRANSFORM = dict(inputs=(ANY,), outputs=(ANY,), cost_class="layout_transform",
                         sync=NO_SYNC)
# A packed conv's: its data and its weights from either storage.  TVM's
# Adreno NCHW4c schedule indexes a buffer operand as it does a texture one
# (a tensor too large for a texture is read as a buffer by the same kernel;
# tests/test_opencl_run.py runs convs reading buffer data and texture or
# buffer weights on PoCL against the CPU), so whether the data is a texture
# is a price, the profile's packed_conv / depthwise_conv read gain, not a
# rule.  Upstream always reads the data from a texture; a profile whose read
# gain is positive and outweighs a copy keeps that plan.
_PACKED_CONV = dict(
    inputs=(ANY,),
    outputs=(ANY,),
    desired_layouts=("NCHW4c", "OIHW4o", "NCHW4c"),
    layout_attrs=("data_layout", "kernel_layout", "out_layout"),
    sync=NO_SYNC,
    keep_unlegalized=True,
    # TVM's Adreno legalization divides by zero on grouped packed convs.
    legalization="conv2d_nchwc",
)
_PACKED_LAYOUTS = {"data_layout": "NCHW4c", "kernel_layout": "OIHW4o"}

# Operators published mobile models (MediaPipe's TFLite files) use, by what
# their legalized kernels are.  Each gets its own entry, so ``texscope ops``
# says what it reads and writes and stage 1 records it on its PrimFunc.
ELEMENTWISE_OPS = (
    ("relax.add", "element-wise"), ("relax.subtract", "element-wise"),
    ("relax.multiply", "element-wise"), ("relax.divide", "element-wise"),
    ("relax.maximum", "element-wise"), ("relax.minimum", "element-wise"),
    ("relax.nn.relu", "element-wise"), ("relax.clip", "element-wise (ReLU6)"),
    ("relax.sigmoid", "element-wise"), ("relax.nn.prelu", "element-wise with per-channel slopes"),
    ("relax.astype", "element-wise (float16 weights to float32)"),
    ("relax.nn.pad", "injective"), ("relax.strided_slice", "injective"),
    ("relax.concat", "injective"), ("relax.reshape", "injective"),
    ("relax.permute_dims", "injective"), ("relax.broadcast_to", "injective"),
    ("relax.image.resize2d", "injective (a gather of up to four neighbours)"),
    # face_landmark_with_attention's crop matrices (texscope's import of
    # MediaPipe's Landmarks2TransformMatrix).
    ("relax.negative", "element-wise"), ("relax.cos", "element-wise"),
    ("relax.sin", "element-wise"), ("relax.atan2", "element-wise"),
    ("relax.take", "injective (a gather along one axis)"),
)
REDUCING_OPS = (
    ("relax.mean", "a reduction"), ("relax.sum", "a reduction"),
    ("relax.max", "a reduction"), ("relax.min", "a reduction"),
    ("relax.matmul", "a matrix product"),
)

# What a parameter is to the operator that reads it, by (operator, operand):
# test data must be valid for its operators (texscope.diagnostics.verify draws
# weights scaled by their fan-in, batch-norm statistics near the identity with
# positive variances).
OPERAND_ROLES: Mapping[tuple[str, int], str] = {
    ("relax.nn.conv2d", 1): "weight",
    ("relax.nn.conv2d_transpose", 1): "weight",
    ("relax.matmul", 1): "weight",
    ("relax.nn.batch_norm", 1): "scale",
    ("relax.nn.batch_norm", 2): "shift",
    ("relax.nn.batch_norm", 3): "shift",
    ("relax.nn.batch_norm", 4): "variance",
    ("relax.nn.layer_norm", 1): "scale",
    ("relax.nn.layer_norm", 2): "shift",
}
# The axes of a weight summed into one output element; every axis but the
# first where an operator is not listed (OIHW: per group, input channels
# times the window).
FAN_IN_AXES: Mapping[str, tuple[int, ...]] = {
    "relax.matmul": (-2,),
    "relax.nn.conv2d_transpose": (0, 2, 3),  # IOHW
}


def fan_in(op: str, shape: Sequence[int]) -> int:
    """Inputs summed into one output element by a weight of ``shape``."""
    axes = FAN_IN_AXES.get(op, tuple(range(1, len(shape))))
    return math.prod(shape[axis] for axis in axes)


BUILTIN: tuple[OpSupport, ...] = (
    OpSupport(
        name="grouped_conv2d_nchw4c",
        key=OpKey("relax.nn.conv2d", _PACKED_LAYOUTS, unless={"groups": "1"}),
        cost_class="depthwise_conv",
        note="a grouped (depthwise) packed conv: few reads per output, priced apart",
        **_PACKED_CONV,
    ),
    OpSupport(
        name="pointwise_conv2d_nchw4c",
        key=OpKey("relax.nn.conv2d", _PACKED_LAYOUTS, window=(1, 1)),
        cost_class="pointwise_conv",
        note="a 1x1 packed conv: a matrix product per pixel, each input texel read once per "
        "output block and never by a neighbour, priced apart from convs with a window (TVM's "
        "Adreno work moved 1x1 convs to buffers; on an H200 they lose from textures where 3x3 "
        "convs gain); a profile without the class prices it as packed_conv",
        **_PACKED_CONV,
    ),
    OpSupport(
        name="conv2d_nchw4c",
        key=OpKey("relax.nn.conv2d", _PACKED_LAYOUTS),
        cost_class="packed_conv",
        note="the Adreno NCHW4c kernel reads its data, and its weights where they "
        "fit, through the texture cache where the profile says it pays",
        **_PACKED_CONV,
    ),
    OpSupport(
        name="conv2d_transpose",
        key=OpKey("relax.nn.conv2d_transpose"),
        inputs=(BUFFER,),
        outputs=(BUFFER,),
        # ConvertLayout would push a packed input layout into it and fail.
        layout_attrs=("data_layout", "kernel_layout", "out_layout"),
        sync=NO_SYNC,
        note="one stage 1 cannot rewrite as a conv of its zero-inserted data (of symbolic "
        "size, or padded beyond its kernel's reach): no packed kernel, reads buffers",
    ),
    OpSupport(
        name="conv2d_unpacked",
        key=OpKey("relax.nn.conv2d"),
        inputs=(BUFFER,),
        outputs=(BUFFER,),
        sync=NO_SYNC,
        keep_unlegalized=True,
        # What a plain conv is before stage 1 packs it: its channels are
        # padded first, so that it can.
        channel_padding=ChannelPadding(("data_layout", "kernel_layout", "out_layout")),
        note="a conv left in a plain layout (stage 1 pads and packs every conv of "
        "static shape): TVM's generic kernel reads buffers",
    ),
    *(
        OpSupport(
            name=op.rsplit(".", 1)[1],
            key=OpKey(op),
            inputs=(ANY,),
            outputs=(ANY,),
            # Priced as the generic injective entry is: a measured profile's
            # element-wise gains apply to these named operators too.
            cost_class="elementwise",
            texture_gain=0.125,
            sync=NO_SYNC,
            note=f"{kind}: indexes each texel directly, as every injective kernel",
        )
        for op, kind in ELEMENTWISE_OPS
    ),
    *(
        OpSupport(
            name=op.rsplit(".", 1)[1],
            key=OpKey(op),
            inputs=(BUFFER,),
            outputs=(BUFFER,),
            sync=NO_SYNC,
            note=f"{kind}: TVM's generic GPU reduction schedules read and write buffers",
        )
        for op, kind in REDUCING_OPS
    ),
    OpSupport(
        name="layout_transform",
        key=OpKey("relax.layout_transform"),
        note="packs channels into whole texels on write; reads either",
        **_LAYOUT_TRANSFORM,
    ),
    OpSupport(
        name="pool",
        # TOPI tags every pool's block, whoever legalized it (texscope's stage
        # 1 or upstream's): one entry for all.  A pool whose tensors are not
        # packed 5-D reads and writes buffers anyway (they fit no texture).
        key=ScheduleRuleKey({"meta_schedule.pool_max", "meta_schedule.pool_avg",
                             "meta_schedule.adaptive_pool_avg"},
                            ops=("relax.nn.max_pool2d", "relax.nn.avg_pool2d",
                                 "relax.nn.adaptive_avg_pool2d")),
        inputs=(ANY,),
        outputs=(ANY,),
        cost_class="pool",
        sync=NO_SYNC,
        note="reads and writes whole texels (texscope's TexelWriter schedule keeps "
        "four lanes of accumulator)",
    ),
    OpSupport(
        name="layer_norm",
        key=OpKey("relax.nn.layer_norm"),
        inputs=(ANY, BUFFER),
        # Its texels would each need the row's mean and variance: TexelWriter
        # declines to recompute them per texel, and TVM's Adreno fallback
        # leaves the kernel unbound to threads (found by the OpenCL fuzzer).
        outputs=(BUFFER,),
        cost_class="layer_norm",
        sync=NO_SYNC,
        note="reads the packed activation either way, writes a buffer; gamma and beta "
        "are 1-D buffers",
    ),
    OpSupport(
        name="injective",
        key=PatternKey(PATTERN_INJECTIVE),
        inputs=(ANY,),
        outputs=(ANY,),
        cost_class="elementwise",
        sync=NO_SYNC,
        note="element-wise, broadcast and injective kernels index each texel directly",
    ),
    OpSupport(
        name="layout_transform_legalized",
        key=DataMovementKey(),
        **_LAYOUT_TRANSFORM,
        note="a layout transform legalized before texscope saw it (upstream's stage 1)",
    ),
)

_user_entries: list[OpSupport] = []


def register_op(support: OpSupport) -> OpSupport:
    """Add an entry; it takes precedence over built-in and earlier ones.

    Returns the entry, so it can be used as an expression.
    """
    _user_entries.insert(0, support)
    return support


def entries() -> tuple[OpSupport, ...]:
    """All entries in lookup order, the opaque fallback last."""
    return (*_user_entries, *BUILTIN, OPAQUE)


def support_for(call: relax.Call, mod: tvm.IRModule) -> OpSupport:
    """The entry describing a call: the first that matches, else the opaque fallback.

    (A direct call of a GlobalVar matches no operator and no ``call_tir``
    pattern: it is opaque, buffers in and out.  The pipeline inlines or
    refuses calls between Relax functions before it asks.)
    """
    # The operator is looked up once: an operator key of another operator
    # cannot match, and asking each one costs an FFI round trip per entry.
    op, _ = recorded_op(call, mod)
    for entry in entries():
        if isinstance(entry.key, OpKey) and entry.key.op != op:
            continue
        if entry.key.matches(call, mod):
            return entry
    return OPAQUE


def _op_entries():
    return [e for e in entries() if isinstance(e.key, OpKey)]


def kept_ops() -> list[str]:
    """Relax operators stage 1 leaves unlegalized."""
    return sorted({e.key.op for e in _op_entries() if e.keep_unlegalized})


def packed_legalizations() -> dict[str, str]:
    """Kept operators with a texscope legalization: operator to its name
    (the first entry naming one wins)."""
    found: dict[str, str] = {}
    for e in _op_entries():
        if e.keep_unlegalized and e.legalization:
            found.setdefault(e.key.op, e.legalization)
    return found


def channel_paddings() -> dict[str, ChannelPadding]:
    """Operators whose channels stage 1 pads, and how (the first entry wins)."""
    found: dict[str, ChannelPadding] = {}
    for e in _op_entries():
        if e.channel_padding is not None:
            found.setdefault(e.key.op, e.channel_padding)
    return found


def recorded_attrs() -> dict[str, list[str]]:
    """Operators stage 1 legalizes with a record, and the attributes to record."""
    kept = set(kept_ops())
    fields: dict[str, set] = {}
    for e in _op_entries():
        if e.key.op not in kept:
            fields.setdefault(e.key.op, set()).update(e.key.where)
    return {op: sorted(names) for op, names in fields.items()}


def desired_layouts(call: relax.Call) -> dict[str, list[str]]:
    """ConvertLayout's desired layouts for one call (its ``layout_cb``): the
    entry's packed layouts, or the call's own when it is not to be packed."""
    name = call.op.name  # an FFI read: once, not once per entry
    for e in _op_entries():
        if name != e.key.op or not (e.desired_layouts or e.layout_attrs):
            continue
        if e.desired_layouts and all(
            str(_get(call.attrs, k)) == v for k, v in e.pack_when.items()
        ):
            return {e.key.op: list(e.desired_layouts)}
        return {e.key.op: [str(_get(call.attrs, a)) for a in e.layout_attrs]}
    return {}
