"""Run a build on OpenCL with its tensors in the storages the memory plan gives them.

``texscope.opencl.run`` holds every tensor in its own memory object for the
whole run, so a memory plan that put two tensors alive at once into one
storage would still compute the right numbers there.  :func:`run_in_storages`
runs the same kernels, but with each tensor in the storage the planned Relax
module (after ``KillAfterLastUse``, as :class:`texscope.backend.memory.device_memory.MemoryCapture`
keeps it) allocates it from, as the Relax VM would:

- buffer tensors of one storage are one OpenCL buffer of the storage's
  bytes, so a kernel writing one overwrites the others' values;
- an image cannot be made from a buffer on devices without
  ``cl_khr_image2d_from_buffer`` (PoCL), so each texture tensor keeps an
  image of its own, and whenever a tensor is allocated in a storage, the
  storage's buffer and the images of its other tensors are filled with
  garbage first, as the new tensor's values would overwrite them.

A correct plan never reads a tensor after another tensor was allocated in
its storage, so its outputs match; a plan sharing storages between live
tensors reads garbage.  Before running, every tensor is checked to fit its
storage (an image's aligned rows where it is one).
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from ...errors import TexscopeError
from ...ir.graph import ALLOC_STORAGE, ALLOC_TENSOR
from ...opencl.executor import plan_of
from ...opencl.memory import DeviceMemory
from ...opencl.plan import CopyStep
from ...opencl.program import KernelCall, read_program
from ...opencl.session import Launcher, RunResult
from ...opencl.source import compiled_kernels, default_device, pyopencl
from .device_memory import op_name, storage_bytes, allocated_tensor


class _Storages:
    """Tensor name -> the storage it is allocated from and its bytes; the
    program's calls in the order the planned module makes them."""

    def __init__(self):
        self.of: dict[str, object] = {}
        self.size: dict[object, int] = {}
        self.made: set[str] = set()
        self.order: list[KernelCall] = []


def _planned_calls(planned: tvm.IRModule):
    """(storage of each planned tensor, bytes each needs, storage sizes,
    [(callee, tensor arguments)]) of the planned module's main, in order."""
    storage_of, needed, sizes, calls = {}, {}, {}, []
    for block in planned["main"].body.blocks:
        for binding in block.bindings:
            value, name = binding.value, op_name(binding.value)
            if name == ALLOC_STORAGE:
                sizes[binding.var] = storage_bytes(value)
            elif name == ALLOC_TENSOR:
                storage_of[binding.var] = value.args[0]
                needed[binding.var] = allocated_tensor(planned, value, binding.var.ty).needed
            elif isinstance(value, relax.Var) and value in storage_of:
                storage_of[binding.var] = storage_of[value]
            elif isinstance(value, relax.Call) and isinstance(value.op, relax.GlobalVar):
                tensors = [a for a in value.args if isinstance(a, relax.Var)]
                calls.append((value.op.name_hint, tensors))
            elif isinstance(value, relax.Call) and name == "relax.to_vdevice":
                raise TexscopeError("run_in_storages does not run copies", "main", binding.var.name)
    return storage_of, needed, sizes, calls


def _storage_map(planned: tvm.IRModule, program) -> _Storages:
    """Match the planned module's calls to the program's (the module before
    lowering; the order may differ, ``OrderForMemory``) by callee and
    arguments, and name each tensor's storage."""
    storage_of, needed, sizes, calls = _planned_calls(planned)
    constants = {c.tensor.name for c in program.constants}
    steps = [s for s in program.steps if isinstance(s, KernelCall)]
    tensors = [[t for t in s.tensors if t.name not in constants] for s in steps]
    name_of = {param: spec.tensor.name for param, spec in
               zip(planned["main"].params, program.inputs)}
    storages = _Storages()
    storages.size = sizes
    left = list(range(len(steps)))
    for callee, args in calls:
        match = next((i for i in left if steps[i].function == callee
                      and len(tensors[i]) == len(args)
                      and all(name_of.get(a, t.name) == t.name for a, t in zip(args, tensors[i]))),
                     None)
        if match is None:
            raise TexscopeError(f"the planned module calls {callee} on tensors no call of the "
                                "program reads")
        left.remove(match)
        storages.order.append(steps[match])
        for var, spec in zip(args, tensors[match]):
            name_of[var] = spec.name
            if var in storage_of and spec.name not in storages.of:
                storage = storage_of[var]
                if needed[var] > sizes[storage]:
                    raise TexscopeError(
                        f"{spec.name} needs {needed[var]} bytes of its storage "
                        f"{storage.name}, which has {sizes[storage]}", "main", steps[match].binding)
                storages.of[spec.name] = storage
                storages.made.add(spec.name)
    for i in left:
        # Lowered to a view (RewriteDataflowReshape): its outputs are the
        # memory of its first input; run where the program runs it.
        source = tensors[i][0].name
        for spec in tensors[i][1:]:
            if source in storages.of and not spec.is_texture:
                storages.of[spec.name] = storages.of[source]
        made_at = next((k + 1 for k, call in enumerate(storages.order)
                        if source in {t.name for t in call.tensors}), 0)
        storages.order.insert(made_at, steps[i])
    return storages


class _SharedMemory(DeviceMemory):
    """Buffers of one storage are one buffer; see the module docstring."""

    def __init__(self, cl, context, queue, storages: _Storages, rng):
        super().__init__(cl, context, queue)
        self.storages = storages
        self.buffers: dict = {}
        self.members: dict = {}  # storage -> specs allocated in it so far
        self.rng = rng

    def allocate(self, spec):
        storage = self.storages.of.get(spec.name)
        if spec in self.objects or storage is None or spec.is_texture:
            return super().allocate(spec)
        if storage not in self.buffers:
            self.buffers[storage] = self.cl.Buffer(self.context, self.cl.mem_flags.READ_WRITE,
                                                   size=max(self.storages.size[storage], 1))
            self.allocated_bytes += self.storages.size[storage]
        self.objects[spec] = self.buffers[storage]
        return self.objects[spec]

    def made(self, spec) -> None:
        """``spec`` is allocated in its storage now: what the storage held is gone."""
        storage = self.storages.of[spec.name]
        for other in self.members.get(storage, []):
            if other.is_texture:
                self.upload(other, self._garbage(other.shape, other.dtype))
        if storage in self.buffers:
            size = self.storages.size[storage]
            self.cl.enqueue_copy(self.queue, self.buffers[storage],
                                 self._garbage((size // 4,), "float32"))
        self.members.setdefault(storage, []).append(spec)

    def _garbage(self, shape, dtype):
        return self.rng.uniform(-1e3, 1e3, shape).astype(dtype)


def run_in_storages(result, planned: tvm.IRModule, inputs, device=None, seed: int = 0) -> RunResult:
    """Run a :func:`texscope.build` result with its tensors in the storages
    of ``planned`` (its Relax module after ``KillAfterLastUse``).

    Raises
    ------
    TexscopeError
        A tensor does not fit its storage, or the planned module's calls do
        not follow the build's program.
    """
    plan = plan_of(result)
    program = read_program(result.module)
    storages = _storage_map(planned, program)
    cl = pyopencl()
    device = device or default_device()
    context, programs = compiled_kernels(plan.source, device)
    queue = cl.CommandQueue(context)
    memory = _SharedMemory(cl, context, queue, storages, np.random.default_rng(seed))
    for name, array in zip(plan.inputs, inputs):
        memory.upload(plan.spec(name), array)
    for name, array in plan.constants.items():
        memory.upload(plan.spec(name), array)
    launcher = Launcher(cl, programs, memory, plan)
    seen = set(plan.inputs) | set(plan.constants)
    launches: dict[str, list] = {}
    for step in plan.steps:
        if isinstance(step, CopyStep):
            raise TexscopeError("run_in_storages does not run copies", "main", step.binding)
        launches.setdefault(step.binding, []).append(step)
    for call in storages.order:
        for spec in call.tensors:
            if spec.name not in seen:
                seen.add(spec.name)
                if spec.name in storages.made:
                    memory.made(spec)
        for step in launches.get(call.binding, []):
            launcher.launch(step)
    outputs = tuple(memory.download(plan.spec(name)) for name in plan.outputs)
    return RunResult(outputs, (), images=memory.images(), copies=0,
                     allocated_bytes=memory.allocated_bytes)


def storage_count(planned: tvm.IRModule) -> int:
    """How many storages ``planned``'s main allocates."""
    return sum(op_name(b.value) == ALLOC_STORAGE
               for block in planned["main"].body.blocks for b in block.bindings)

