"""Device memory of a build, as the Relax VM allocates it."""

import tvm
from tvm.script import ir as I
from tvm.script import relax as R

import texscope
from modules import rules
from texscope.backend.memory import DeviceMemory, MemoryCapture, device_memory

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
        t = R.memory.alloc_tensor(a, R.prim_value(0), R.shape([1, 2, 4, 4, 4]), R.dtype("float32"), R.prim_value(0))
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
    VDevice on an alloc_tensor's result)."""
    texture = mod.global_infos["vdevice"][1]
    func = mod["main"]
    blocks = []
    for block in func.body.blocks:
        bindings = []
        for binding in block.bindings:
            if binding.var.name in ("t", "t2"):
                ty = binding.var.ty
                var = tvm.relax.Var(binding.var.name, tvm.relax.TensorType(ty.shape, ty.dtype, texture))
                binding = tvm.relax.VarBinding(var, binding.value)
            bindings.append(binding)
        blocks.append(tvm.relax.BindingBlock(bindings))
    body = tvm.relax.SeqExpr(blocks, func.body.body)
    new = tvm.relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs)
    return tvm.IRModule({"main": new}, global_infos=mod.global_infos)


def test_peak_counts_storages_in_bytes_while_they_or_their_tensors_live():
    memory = device_memory(_on_texture(Planned))
    # Storage sizes are bytes whatever their dtype; a and b live together,
    # b is freed with u, and a only with t2: c then takes the place of b.
    assert memory == DeviceMemory(
        peak_bytes=512 + 1024 + 300, inputs_bytes=512, image_bytes=1024, buffer_bytes=400,
        # a needs only its largest tensor (512 bytes), b its 300, c its 100.
        peak_needed_bytes=512 + 512 + 300, image_needed_bytes=512)
    # Without t2's kill, a outlives the function, and c adds to it.
    assert device_memory(_on_texture(_without(Planned, "_t2"))).peak_bytes == 512 + 1024 + 300
    freed_late = device_memory(_on_texture(_without(Planned, "_u")))
    assert freed_late.peak_bytes == 512 + 1024 + 300 + 100


def test_build_reports_its_memory_and_needs_no_more_than_the_all_buffer_build():
    result = texscope.build(rules.Residual, "adreno-opencl")
    figures = {k: v for k, v in result.report.build.items() if k.startswith("memory_")}
    assert figures["memory_image_bytes"] > 0 and figures["memory_image_needed_bytes"] > 0
    assert figures["memory_peak_needed_bytes"] <= figures["memory_peak_bytes"]
    assert "memory peak bytes" in result.report.to_markdown()
    generic = MemoryCapture()
    with tvm.transform.PassContext(instruments=[generic]):
        tvm.compile(rules.Residual, tvm.target.Target({"kind": "opencl"}, host="llvm"))
    buffers = device_memory(generic.modules[-1])
    assert buffers.image_bytes == 0 and buffers.inputs_bytes == figures["memory_inputs_bytes"]
    # Residual's channels are multiples of 4: no texel padding.  Its weights
    # are parameters, packed to OIHW4o on every run: one packed copy may live
    # beside the originals (constant weights are packed by folding instead).
    weights = sum(texscope.backend.memory._tensor_bytes(p.ty) for p in rules.Residual["main"].params[1:])
    assert figures["memory_peak_needed_bytes"] <= buffers.peak_bytes + weights
