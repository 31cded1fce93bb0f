"""Per operator: the registry entry describing it and the storage it reads,
when a packed conv's output feeds it (Adreno OpenCL)."""

import pytest
from tvm import relax
from tvm.relax import op as O

import texscope
from conftest import ADRENO, run_pass
from texscope.knowledge import registry
from texscope.diagnostics.verify import equivalent


def conv_then(make, extra=()):
    """main(x, w, *extra): conv2d (packable, 8 channels) then ``make``."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8, 16, 16), "float32"))
    w = relax.Var("w", relax.TensorType((8, 8, 3, 3), "float32"))
    params = [x, w, *(relax.Var(n, relax.TensorType(s, "float32")) for n, s in extra)]
    with bb.function("main"):
        with bb.dataflow():
            conv = bb.emit(O.nn.conv2d(x, w, padding=1))
            out = bb.emit_output(make(conv, *params[2:]))
        bb.emit_func_output(out, params=params)
    return bb.get()


# operator: (its module, the legalized PrimFunc's name, entry, storage it reads)
CASES = {
    # Padded beyond the kernel's reach (3 > 3 - 1): stage 1 rewrites the
    # others as convs (test_decompose.py), this one stays.
    "conv2d_transpose": (lambda c, k: O.nn.conv2d_transpose(c, k, padding=3, groups=2),
                         [("k", (8, 4, 3, 3))], "conv2d_transpose", "conv2d_transpose", "global"),
    # ConvertLayout unpacks before these: a 4-D tensor is never a texture.
    "strided_slice": (lambda c: O.strided_slice(c, axes=[2], begin=[0], end=[8]), [],
                      "strided_slice", "strided_slice", "global"),
    "reshape": (lambda c: O.reshape(c, (1, 8, 256)), [], "reshape", "reshape", "global"),
    "expand_dims": (lambda c: O.expand_dims(c, 0), [], "expand_dims", "injective", "global"),
    "mean": (lambda c: O.mean(c, axis=[2, 3]), [], "mean", "mean", "global"),
    "sum": (lambda c: O.sum(c, axis=[2, 3]), [], "sum", "sum", "global"),
    "softmax": (lambda c: O.nn.softmax(c, axis=1), [], "softmax", "opaque", "global"),
    "layer_norm": (lambda c, g, b: O.nn.layer_norm(c, g, b, axes=[-1]), [("g", (16,)), ("b", (16,))],
                   "layer_norm", "layer_norm", "texture"),
    "resize2d": (lambda c: O.image.resize2d(c, (32, 32), method="nearest_neighbor"), [],
                 "resize2d", "resize2d", "global"),
    "matmul": (lambda c, m: O.matmul(c, m), [("m", (16, 16))], "matmul", "matmul", "global"),
    "concat": (lambda c: O.concat([c, c], axis=1), [], "concatenate", "concat", "texture"),
    "split": (lambda c: O.split(c, 2, axis=1)[0], [], "split", "injective", "texture"),
    "max_pool2d": (lambda c: O.nn.max_pool2d(c, 3, 1, 1), [], "max_pool2d", "pool", "texture"),
    "avg_pool2d": (lambda c: O.nn.avg_pool2d(c, 3, 1, 1), [], "avg_pool2d", "pool", "texture"),
    # To 2 x 2: to 1 x 1, the 16 x 16 map is pooled by rows then columns
    # (test_global_pool.py).
    "adaptive_avg_pool2d": (lambda c: O.nn.adaptive_avg_pool2d(c, (2, 2)), [], "adaptive_avg_pool2d",
                            "pool", "texture"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_operator_entry_and_read_storage(name):
    make, extra, prim_func, entry, reads = CASES[name]
    before = conv_then(make, extra)
    stage1 = run_pass(texscope.ConvertToPackedLayout(ADRENO), before)
    after = run_pass(texscope.AnnotateTextureScope(ADRENO, check=True), stage1)
    (call,) = [b.value for b in after["main"].body.blocks[0].bindings
               if isinstance(b.value, relax.Call) and b.value.op.name == "relax.call_tir"
               and b.value.args[0].name_hint == prim_func]
    assert registry.support_for(call, after).name == entry
    first = call.args[1].fields[0].ty
    assert ("texture" if "texture" in str(first.vdevice.memory_scope) else "global") == reads
    assert equivalent(before, after).ok
