"""Device memory of a build, as the Relax VM allocates it."""

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

import texscope
from conftest import run_pass
from modules import rules
from texscope.backend.memory.device_memory import (DeviceMemory, MemoryCapture, SizeTextureStorages, _lifetimes,
                                                   op_name, buffers_as_images_peak, device_memory)
from texscope.knowledge.scopes import FLAVOUR_AXES, image_bytes
from texscope.backend import upstream
from texscope.knowledge.targets import texture_target
from texscope.models import zoo

TEX = "opencl:0:global.texture"


@I.ir_module(check_well_formed=False)
class Planned:
    """Storage a holds a texture (and, later, a smaller one) and lives with b
    until its last tensor dies, after the kill of a itself; c comes after."""

    I.module_global_infos({"vdevice": [I.vdevice("opencl", 0, "global"),
                                       I.vdevice("opencl", 0, "global.texture")]})

    @R.function(pure=False)
    def main(x: R.Tensor((1, 2, 4, 4, 4), "float32")):  # 512 bytes
        a = R.memory.alloc_storage(R.shape([1024]), R.prim_value(0), R.str("global"), R.dtype("float32"))
        t = R.memory.alloc_tensor(a, R.prim_value(0), R.shape([1, 2, 4, 3, 4]), R.dtype("float32"), R.prim_value(0))
        b = R.memory.alloc_storage(R.shape([300]), R.prim_value(0), R.str("global"), R.dtype("uint8"))
        u = R.memory.alloc_tensor(b, R.prim_value(0), R.shape([75]), R.dtype("float32"), R.prim_value(0))
        t2 = R.memory.alloc_tensor(a, R.prim_value(0), R.shape([1, 1, 4, 4, 4]), R.dtype("float32"), R.prim_value(0))
        _k = R.memory.kill_storage(a)
        _t = R.memory.kill_tensor(t)
        _u = R.memory.kill_tensor(u)
        _k2 = R.memory.kill_storage(b)
        _t2 = R.memory.kill_tensor(t2)
        c = R.memory.alloc_storage(R.shape([100]), R.prim_value(0), R.str("global"), R.dtype("float32"))
        v = R.memory.alloc_tensor(c, R.prim_value(0), R.shape([25]), R.dtype("float32"), R.prim_value(0))
        return v


def _without(mod, name):
    func = mod["main"]
    blocks = [tvm.relax.BindingBlock([b for b in block.bindings if b.var.name != name])
              for block in func.body.blocks]
    new = tvm.relax.Function(func.params, tvm.relax.SeqExpr(blocks, func.body.body),
                             func.ret_ty, func.is_pure, func.attrs)
    return tvm.IRModule({"main": new}, global_infos=mod.global_infos)


def _on_texture(mod):
    """Planned with t and t2 typed as textures (TVMScript cannot put a
    VDevice on an alloc_tensor's result), their kills naming the new vars."""
    texture = mod.global_infos["vdevice"][1]
    func = mod["main"]
    blocks, renamed = [], {}
    for block in func.body.blocks:
        bindings = []
        for binding in block.bindings:
            value, var = binding.value, binding.var
            if isinstance(value, tvm.relax.Call) and any(a in renamed for a in value.args):
                value = tvm.relax.Call(value.op, [renamed.get(a, a) for a in value.args],
                                       value.attrs, value.ty_args)
            if var.name in ("t", "t2"):
                ty = var.ty
                renamed[var] = tvm.relax.Var(var.name, tvm.relax.TensorType(ty.shape, ty.dtype, texture))
                var = renamed[var]
            bindings.append(tvm.relax.VarBinding(var, value))
        blocks.append(tvm.relax.BindingBlock(bindings))
    body = tvm.relax.SeqExpr(blocks, func.body.body)
    new = tvm.relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs)
    return tvm.IRModule({"main": new}, global_infos=mod.global_infos)


def test_peak_counts_storages_in_bytes_while_they_or_their_tensors_live():
    memory = device_memory(_on_texture(Planned))
    # Storage sizes are bytes whatever their dtype; a and b live together,
    # b is freed with u, and a only with t2: c then takes the place of b.
    # t is 2 layers of 4 rows of 3 RGBA float32 texels: 48-byte rows, each
    # starting at a multiple of 64 bytes: a 512-byte image of 384 bytes of
    # values (t2's rows of 4 texels fill their 64 bytes); the peak with a
    # as large as t's image (512 + 512 + 300) less the peak with a as large
    # as t's values (512 + 384 + 300) is 128 bytes of texel padding.
    # The pool: a and b each take a new 4 KiB page; c takes a page freed.
    assert memory == DeviceMemory(
        peak_bytes=512 + 1024 + 300, inputs_bytes=512, image_bytes=1024, buffer_bytes=400,
        texel_padding_bytes=128, pooled_bytes=512 + 2 * 4096)
    # Without t2's kill, a outlives the function: c comes beside it, after b.
    kept_a = device_memory(_on_texture(_without(Planned, "_t2")))
    assert kept_a.peak_bytes == 512 + 1024 + 300 and kept_a.pooled_bytes == 512 + 2 * 4096
    # Without u's kill, b does, and a is freed: c takes a's page.
    kept_b = device_memory(_on_texture(_without(Planned, "_u")))
    assert kept_b.peak_bytes == 512 + 1024 + 300 and kept_b.pooled_bytes == 512 + 2 * 4096
    # Without both, nothing is freed: c adds to both, on a page of its own.
    kept = device_memory(_on_texture(_without(_without(Planned, "_t2"), "_u")))
    assert kept.peak_bytes == 512 + 1024 + 300 + 100 and kept.pooled_bytes == 512 + 3 * 4096
    # As buffers, no tensor has rows to align.
    assert device_memory(Planned).texel_padding_bytes == 0


def test_inputs_count_each_constant_once_wherever_main_holds_it():
    """A weight the model carries as a constant is device memory from the
    start, as its parameters are: counted once however many calls read it,
    and a constant only returned counts too."""
    weight = relax.const(np.ones((8,), "float32"))  # 32 bytes
    returned = relax.const(np.ones((2, 2), "float16"))  # 8 bytes
    x = relax.Var("x", relax.TensorType((4,), "float32"))  # 16 bytes
    builder = relax.BlockBuilder()
    with builder.function("main", [x], pure=False):
        y = builder.emit(relax.Call(relax.ExternFunc("f"), [x, weight, weight],
                                    ty_args=[relax.TensorType((4,), "float32")]))
        builder.emit_func_output(relax.Tuple([y, returned, weight]))
    memory = device_memory(builder.get())
    assert memory.inputs_bytes == 16 + 32 + 8 and memory.peak_bytes == 16 + 32 + 8


def test_a_storages_largest_tensor_is_found_once_not_at_every_event():
    plan = _lifetimes(_on_texture(Planned), "main")
    asked = []
    size_of = plan.largest(lambda tensor: asked.append(tensor) or tensor.needed)
    # A peak asks a storage's size at each allocation and release; a is as
    # large as t's image here (see the test above).
    assert plan.peak(size_of) == 512 + 512 + 300
    assert plan.peak(size_of) == 512 + 512 + 300
    assert len(asked) == sum(len(held) for held in plan.tensors.values())


ADRENO = {"kind": "opencl", "keys": ["adreno", "opencl", "gpu", "texture"], "device": "adreno"}


@I.ir_module(check_well_formed=False)
class Unplanned:
    """A texture t of 2 rows of 3 float32 texels, then a buffer y."""

    I.module_global_infos({"vdevice": [I.vdevice(ADRENO, 0, "global"),
                                       I.vdevice(ADRENO, 0, "global.texture")]})

    @T.prim_func
    def negate(a: T.handle, b: T.handle):
        A = T.match_buffer(a, (1, 1, 2, 3, 4), "float32")
        B = T.match_buffer(b, (1, 1, 2, 3, 4), "float32")
        for i0, i1, i2, i3, i4 in T.grid(1, 1, 2, 3, 4):
            with T.sblock("B"):
                B[i0, i1, i2, i3, i4] = -A[i0, i1, i2, i3, i4]

    @R.function
    def main(x: R.Tensor((1, 1, 2, 3, 4), "float32")) -> R.Tensor((1, 1, 2, 3, 4), "float32"):
        R.func_attr({"relax.force_pure": True})
        cls = Unplanned
        t = R.builtin.alloc_tensor(R.shape([1, 1, 2, 3, 4]), R.dtype("float32"), R.prim_value(1),
                                   R.str("global.texture"))
        _ = cls.negate(x, t)
        y = R.builtin.alloc_tensor(R.shape([1, 1, 2, 3, 4]), R.dtype("float32"), R.prim_value(0),
                                   R.str("global"))
        _1 = cls.negate(t, y)
        return y


def _storage_sizes(mod):
    return [[int(d) for d in b.value.args[0].values] for block in mod["main"].body.blocks
            for b in block.bindings if op_name(b.value) == "relax.memory.alloc_storage"]


def test_a_texture_storage_is_as_large_as_its_image_not_tvms_four_times():
    planned = relax.transform.StaticPlanBlockMemory()(Unplanned)
    # t's image: 2 rows of 3 texels of 16 bytes, each row rounded up to the
    # target's 64-byte image_base_address_alignment: 2 * 64 = 128 bytes.
    # TVM 0.27 multiplies that byte count by the float32's 4 bytes once more.
    assert _storage_sizes(planned) == [[128 * 4]]
    sized = run_pass(SizeTextureStorages, planned)
    assert _storage_sizes(sized) == [[128]]
    # Only the size changed: the same variables, the other values untouched.
    pairs = zip(planned["main"].body.blocks[0].bindings, sized["main"].body.blocks[0].bindings)
    for old, new in pairs:
        assert new.var.same_as(old.var)
        if op_name(old.value) == "relax.memory.alloc_storage":
            assert all(a.same_as(b) for a, b in zip(old.value.args[1:], new.value.args[1:]))
        else:
            assert new.value.same_as(old.value)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("flavour", sorted(FLAVOUR_AXES))
@pytest.mark.parametrize("shape", [(1, 1, 2, 3, 4), (2, 3, 5, 7, 4), (1, 16, 14, 14, 4), (3, 1, 1, 1, 4)])
def test_image_bytes_are_tvms_texture_bytes(shape, flavour, dtype):
    target = tvm.target.Target(ADRENO)
    tvms = tvm.get_global_func("DeviceGetMemSize.opencl")(list(shape), dtype,
                                                          relax.VDevice(target, 0, flavour))
    itemsize = tvm.DataType(dtype).bits // 8
    assert image_bytes(shape, itemsize, flavour, 64) == int(tvms)


@I.ir_module(check_well_formed=False)
class AllBuffers:
    """One 3-channel 5x5 activation in a buffer, beside its input."""

    @R.function(pure=False)
    def main(x: R.Tensor((1, 3, 5, 5), "float32")):  # 300 bytes
        s = R.memory.alloc_storage(R.shape([300]), R.prim_value(0), R.str("global"), R.dtype("float32"))
        y = R.memory.alloc_tensor(s, R.prim_value(0), R.shape([1, 3, 5, 5]), R.dtype("float32"), R.prim_value(0))
        return y


def test_the_all_buffer_peak_as_images_pads_channels_to_texels_and_aligns_rows():
    assert device_memory(AllBuffers).peak_bytes == 300 + 300
    # y as texels: [1, 1, 5, 5, 4], 25 texels of 16 bytes.  global.texture
    # makes 5 rows of 5 (80 bytes, aligned to 128): 640; texture-weight and
    # texture-nhwc one row of 25 (400 bytes, aligned to 448): the least, 448.
    assert buffers_as_images_peak(AllBuffers) == 300 + 448
    # The channel axis decides what packs: read as NHWC the channels are 5,
    # 2 texels at each of 3 x 5 positions: 30 texels of 16 bytes, one row of
    # 480 bytes aligned to 512 (or 2 rows of 240 aligned to 256 each).
    assert buffers_as_images_peak(AllBuffers, channel_axis=3) == 300 + 512


def _planned(build, **context):
    capture = MemoryCapture()
    with tvm.transform.PassContext(instruments=[capture], **context):
        build()
    return capture.modules[-1]


def test_build_sizes_every_image_storage_by_its_largest_tensor():
    result = texscope.build(rules.Residual, "adreno-opencl")
    figures = {k: v for k, v in result.report.build.items() if k.startswith("memory_")}
    assert figures["memory_image_bytes"] > 0 and "memory texel padding bytes" in result.report.to_markdown()
    mod = _planned(lambda: texscope.build(rules.Residual, "adreno-opencl"))
    lifetimes = _lifetimes(mod, "main")
    images = [s for s, held in lifetimes.tensors.items() if any(t.image for t in held)]
    assert images
    for storage in images:
        assert lifetimes.sizes[storage] == max(t.needed for t in lifetimes.tensors[storage])
    assert figures["memory_peak_bytes"] == device_memory(mod).peak_bytes
    # Without texscope's planning and sizing, TVM's sizes: each image storage
    # 4x (float32); TVM's planner makes the same storages here.
    tvm_sized = _planned(lambda: texscope.build(rules.Residual, "adreno-opencl"),
                         disabled_pass=["texscope.SizeTextureStorages", "texscope.PlanStorages"])
    assert device_memory(tvm_sized).image_bytes == 4 * figures["memory_image_bytes"]


GENERIC = tvm.target.Target({"kind": "opencl"}, host="llvm")
@pytest.mark.parametrize("network, constants", [
    ("resnet", False), ("mobilenet_v2", False), ("unet", False), ("inception", False),
    ("resnet", True), ("unet", True), ("chain64", True), ("mobilenet_v2", True), ("inception", True),
])
def test_a_texture_plan_needs_at_most_the_all_buffer_peak_plus_texel_padding(network, constants):
    mod = zoo.NETWORKS[network]()
    mod = zoo.with_constant_weights(mod) if constants else mod
    buffers = _planned(lambda: tvm.compile(mod, GENERIC))
    ours = device_memory(_planned(lambda: texscope.build(mod, "adreno-opencl")))
    theirs = device_memory(buffers)
    # Constant weights are folded into OIHW4o, their output (and, for the
    # RGB stem, input) channels padded to texels: they replace the originals,
    # and grow by no more than that padding.
    grown = ours.inputs_bytes - theirs.inputs_bytes
    weights = [[int(d) for d in c.ty.shape.values] for c in _constants_of(mod)]
    padding = sum((-(-o // 4) * -(-i // 4) * 16 - o * i) * h * w * 4  # float32
                  for o, i, h, w in (shape for shape in weights if len(shape) == 4))
    assert 0 <= grown <= padding
    # The activations: the all-buffer plan's storages as images (zoo networks are NCHW).
    allowance = buffers_as_images_peak(buffers) + grown
    assert allowance >= theirs.peak_bytes
    assert ours.peak_bytes <= allowance


def test_a_parameter_weights_packed_copy_is_in_the_peak_and_is_no_padding():
    # A weight that is a parameter is packed (OIHW4o) on every run, and the
    # packed copy lives beside the original while its conv runs: memory the
    # run needs, so it counts, but it is no texel padding.  chain64's peak is
    # over the allowance by exactly one of them; its constant-weight form
    # (packed once, at build time) is not over.
    mod = zoo.NETWORKS["chain64"]()
    buffers = _planned(lambda: tvm.compile(mod, GENERIC))
    ours = device_memory(_planned(lambda: texscope.build(mod, "adreno-opencl")))
    assert ours.peak_bytes - buffers_as_images_peak(buffers) == 32 * 32 * 3 * 3 * 4


def _constants_of(mod):
    found = []
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            for arg in getattr(binding.value, "args", []):
                if isinstance(arg, tvm.ir.expr.GenericConst):
                    found.append(arg)
    return found


def test_tvms_own_adreno_build_leaves_a_module_with_constant_weights_alone():
    # bench/memory.py builds one module with every tool in turn.
    mod = zoo.with_constant_weights(zoo.NETWORKS["resnet"]())
    before = tvm.ir.save_json(mod)
    upstream.adreno_build(mod, tvm.target.Target(texture_target("adreno-opencl").target, host="llvm"))
    assert tvm.ir.save_json(mod) == before
