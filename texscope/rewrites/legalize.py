"""Legalizations texscope uses in place of TVM's.

Packed (NCHW4c / OIHW4o) conv2d, for any number of groups:

TVM's Adreno legalization computes ``occ // (oc_chunk // groups)`` to find an
output channel's group; for a depthwise conv ``oc_chunk < groups`` and that is a
division by zero.  Here each output channel's input channels are indexed
directly.  TVM's compute also writes float32 whatever the call's output type
(float16 convs then fail in FuseTIR on mismatched buffers), so only ungrouped
float32 convs keep it.

Every operator, once per signature (:mod:`texscope.rewrites.legalize_once`):
LegalizeOps builds a TE compute and a PrimFunc for each call, even for the
nine identical batch norms of a ResNet, which was most of stage 1's time.

Layout transforms, as a gather: TVM writes a bijective layout transform as a
loop over the input scattering to transformed indices, which
AnnotateTIROpPattern can only call opaque, so nothing fuses with it and every
packed batch-norm parameter or channel-padded input costs an extra kernel.
Indexing each output element through the inverse map makes it injective.
"""

from __future__ import annotations

import tvm
from tvm import relax, te, topi
from tvm.relax.transform.legalize_ops import adreno as legalize_adreno
from tvm.topi.nn.utils import get_pad_tuple
from tvm.topi.utils import get_const_tuple

from ..ir.graph import relax_bindings, static_shape
from ..knowledge import registry
from .legalize_once import TargetBinding, once_per_signature, output_storage_blind


def grouped_conv2d_nchwc(data, kernel, strides, padding, dilation, groups, out_dtype,
                         out_size=None):
    """TE compute of a grouped conv2d, data NCHW[x]c, kernel OIHW[x]o.

    ``out_size`` is the output's (height, width) as Relax inferred it; where
    the data's size is symbolic, the output buffer must carry those very
    expressions, since FuseTIR maps the conv's output and its readers'
    inputs (legalized from Relax's types) to one buffer only when the shapes
    are structurally equal.
    """
    stride_h, stride_w = strides
    dilation_h, dilation_w = dilation
    batch, _, in_h, in_w, lanes = get_const_tuple(data.shape)
    out_chunks, in_per_group, kernel_h, kernel_w, out_lanes = get_const_tuple(kernel.shape)
    out_per_group = out_chunks * out_lanes // groups
    top, left, bottom, right = get_pad_tuple(
        padding, ((kernel_h - 1) * dilation_h + 1, (kernel_w - 1) * dilation_w + 1)
    )
    out_h = (in_h + top + bottom - (kernel_h - 1) * dilation_h - 1) // stride_h + 1
    out_w = (in_w + left + right - (kernel_w - 1) * dilation_w - 1) // stride_w + 1
    if out_size is not None:
        out_h, out_w = out_size
    if top or left or bottom or right:
        data = topi.nn.pad(data, (0, 0, top, left, 0), (0, 0, bottom, right, 0),
                           name="conv2d_data_pad")
    ic = te.reduce_axis((0, in_per_group), name="ic")
    kh = te.reduce_axis((0, kernel_h), name="kh")
    kw = te.reduce_axis((0, kernel_w), name="kw")

    def compute(n, oc_chunk, y, x, oc_lane):
        channel = (oc_chunk * out_lanes + oc_lane) // out_per_group * in_per_group + ic
        return te.sum(
            data[n, channel // lanes, y * stride_h + kh * dilation_h,
                 x * stride_w + kw * dilation_w, channel % lanes].astype(out_dtype)
            * kernel[oc_chunk, ic, kh, kw, oc_lane].astype(out_dtype),
            axis=[ic, kh, kw],
        )

    return te.compute((batch, out_chunks, out_h, out_w, out_lanes), compute,
                      name="conv2d_NCHWc_OIHWo", tag="conv2d_NCHWc_OIHWo")


@output_storage_blind  # both computes get the call's ty_args as they are
def conv2d_nchwc(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    """Legalize a packed conv2d; TVM's Adreno compute when ungrouped, float32
    and of static size (its output shape is an unsimplified expression of a
    symbolic size, which FuseTIR cannot match with the conv's readers)."""
    static = static_shape(call.ty) is not None
    if int(call.attrs.groups) == 1 and str(call.ty.dtype) == "float32" and static:
        return legalize_adreno.conv2d_NCHWc_OIHWo(bb, call)
    return bb.call_te(
        grouped_conv2d_nchwc, call.args[0], call.args[1],
        [int(s) for s in call.attrs.strides], [int(p) for p in call.attrs.padding],
        [int(d) for d in call.attrs.dilation], int(call.attrs.groups), str(call.ty.dtype),
        None if static else list(call.ty.shape.values[2:4]),
        # The planned output storage (its VDevice) is in ty_args; without it
        # the output took whatever scope the specialization inferred.
        ty_args=call.ty_args,
        primfunc_name_hint="conv2d_NCHWc_OIHWo",
    )


def layout_transform_gather(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    """Legalize a layout transform as a gather through the inverse index map.

    Falls back to TVM's legalization where the map pads (that one is a gather
    already) or a shape is unknown; a symbolic size is fine.
    """
    data = call.args[0]
    index_map = call.attrs.index_map
    if not isinstance(data.ty.shape, relax.ShapeExpr) or not isinstance(call.ty.shape, relax.ShapeExpr):
        return _DEFAULT_LAYOUT_TRANSFORM(bb, call)
    inverse, padding = index_map.non_surjective_inverse(data.ty.shape.values)
    if not (isinstance(padding, tvm.tirx.IntImm) and int(padding) == 0):
        return _DEFAULT_LAYOUT_TRANSFORM(bb, call)
    # Of symbolic size, Relax's extents: FuseTIR joins the gather's output
    # with its readers' inputs only where the shapes are structurally equal.
    static = static_shape(call.ty) is not None

    def gather(tensor):
        return te.compute(
            index_map.map_shape(list(tensor.shape)) if static else list(call.ty.shape.values),
            lambda *index: tensor(*inverse.map_indices(index)),
            name="te_layout_transform",
        )

    return bb.call_te(gather, data, primfunc_name_hint="te_layout_transform")


_DEFAULT_LAYOUT_TRANSFORM = tvm.ir.Op.get("relax.layout_transform").get_attr("FLegalize")

# texscope's legalizations of kept operators, by the names the registry's
# entries give them (OpSupport.legalization).
LEGALIZATIONS = {"conv2d_nchwc": conv2d_nchwc}
# Operators texscope legalizes differently wherever they appear.
REPLACED = {"relax.layout_transform": layout_transform_gather}


def packed_legalizations() -> dict:
    """For LegalizeOps once the module is annotated: each kept operator the
    registry gives a texscope legalization, to that legalization."""
    return {op: LEGALIZATIONS[name] for op, name in registry.packed_legalizations().items()}


def legalization_of(op_name: str):
    """texscope's legalization of an operator where it replaces TVM's, else TVM's
    (None for an operator without one)."""
    return REPLACED.get(op_name) or tvm.ir.Op.get(op_name).get_attr("FLegalize")


def legalize_map(mod: tvm.IRModule, overrides: dict | None = None,
                 skip: list[str] = (), binding: TargetBinding | None = None) -> dict:
    """A ``customize_legalize_map`` for LegalizeOps covering every operator
    called in ``mod`` but ``skip``: ``overrides`` where given (as they are:
    one that changes what it legalized wraps its own legalization in
    :func:`once_per_signature`), else :func:`legalization_of`,
    :func:`once_per_signature` (with ``binding``)."""
    overrides = overrides or {}
    ops = {
        binding.value.op.name for _, binding in relax_bindings(mod)
        if isinstance(binding.value, relax.Call) and isinstance(binding.value.op, tvm.ir.Op)
    }
    table = {}
    for name in sorted(ops - set(skip)):
        if name in overrides:
            table[name] = overrides[name]
        elif legalization_of(name) is not None:
            table[name] = once_per_signature(legalization_of(name), binding)
    return table


def LegalizeOnce(overrides: dict | None = None,  # pylint: disable=invalid-name
                 skip: tuple[str, ...] = ()) -> tvm.ir.transform.Pass:
    """LegalizeOps with :func:`legalize_map`, ``overrides`` (plain
    legalizations) each :func:`once_per_signature` too: one TE compute and
    PrimFunc per signature."""

    @tvm.transform.module_pass(opt_level=0, name="texscope.LegalizeOnce")
    def run(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        # A table per run: what once_per_signature keeps belongs to one BlockBuilder.
        binding = TargetBinding()
        once = {op: once_per_signature(f, binding) for op, f in (overrides or {}).items()}
        table = legalize_map(mod, once, skip, binding)
        return binding.finish(relax.transform.LegalizeOps(table, list(skip))(mod))

    return run
