"""Run a build on OpenCL with its tensors in the storages the memory plan gives them.

``texscope.opencl.run`` holds every tensor in its own memory object for the
whole run, so a memory plan that put two tensors alive at once into one
storage would still compute the right numbers there.  :func:`run_in_storages`
runs the same kernels, but with each tensor in the storage the planned Relax
module (after ``KillAfterLastUse``, as :class:`texscope.backend.memory.MemoryCapture`
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

from ..errors import TexscopeError
from ..opencl.executor import plan_of
from ..opencl.memory import DeviceMemory
from ..opencl.plan import CopyStep
from ..opencl.program import KernelCall, read_program
from ..opencl.replay import RunResult, _Launcher
from ..opencl.source import compiled, default_device, pyopencl
from .memory import _op_name, _storage_bytes, _tensor


class _Storages:
    """Tensor name -> the storage it is allocated from, its bytes, and whether
    the tensor is made there (rather than a view of another's memory)."""

    def __init__(self):
        self.of: dict[str, object] = {}
        self.size: dict[object, int] = {}
        self.made: set[str] = set()


def _storage_map(planned: tvm.IRModule, program) -> _Storages:
    """Match the program's calls (the module before lowering) to the planned
    module's calls, in order, and name each tensor's storage."""
    main = planned["main"]
    storage_of: dict = {}  # planned var -> storage var
    needed: dict = {}  # planned var -> bytes it needs of its storage
    sizes: dict = {}
    calls = []  # (callee name, args)
    for block in main.body.blocks:
        for binding in block.bindings:
            value, name = binding.value, _op_name(binding.value)
            if name == "relax.memory.alloc_storage":
                sizes[binding.var] = _storage_bytes(value)
            elif name == "relax.memory.alloc_tensor":
                storage_of[binding.var] = value.args[0]
                needed[binding.var] = _tensor(planned, value, binding.var.ty).needed
            elif isinstance(binding.value, relax.Var) and binding.value in storage_of:
                storage_of[binding.var] = storage_of[binding.value]
            elif isinstance(value, relax.Call) and isinstance(value.op, relax.GlobalVar):
                calls.append((value.op.name_hint, value.args))
    storages = _Storages()
    storages.size = sizes
    position = 0
    for step in program.steps:
        if not isinstance(step, KernelCall):
            continue
        if position < len(calls) and calls[position][0] == step.function:
            args = [a for a in calls[position][1] if isinstance(a, relax.Var)]
            tensors = step.tensors
            if len(args) != len(tensors):
                raise TexscopeError(f"{step.function} takes {len(tensors)} tensors before "
                                    f"lowering and {len(args)} after", "main", step.binding)
            for spec, var in zip(tensors, args):
                if var in storage_of and spec.name not in storages.of:
                    storage = storage_of[var]
                    if needed[var] > sizes[storage]:
                        raise TexscopeError(
                            f"{spec.name} needs {needed[var]} bytes of its storage "
                            f"{storage.name}, which has {sizes[storage]}", "main", step.binding)
                    storages.of[spec.name] = storage
                    storages.made.add(spec.name)
            position += 1
        else:
            # Lowered to a view (RewriteDataflowReshape): its outputs are the
            # memory of its first input.
            source = step.tensors[0].name
            for spec in step.tensors[1:]:
                if source in storages.of and not spec.is_texture:
                    storages.of[spec.name] = storages.of[source]
    if position != len(calls):
        raise TexscopeError(f"the planned module calls {len(calls)} kernels, the program "
                            f"{position} of them in order")
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
    context, source = compiled(plan.source, device)
    queue = cl.CommandQueue(context)
    memory = _SharedMemory(cl, context, queue, storages, np.random.default_rng(seed))
    for name, array in zip(plan.inputs, inputs):
        memory.upload(plan.spec(name), array)
    for name, array in plan.constants.items():
        memory.upload(plan.spec(name), array)
    launcher = _Launcher(cl, source, memory, plan)
    seen = set(plan.inputs) | set(plan.constants)
    for step in plan.steps:
        if isinstance(step, CopyStep):
            memory.copy(plan.spec(step.source), plan.spec(step.target))
            seen.add(step.target)
            continue
        for arg in step.args:
            name = getattr(arg, "tensor", None)
            if name is not None and name not in seen:
                seen.add(name)
                if name in storages.made:
                    memory.made(plan.spec(name))
        launcher.launch(step)
    outputs = tuple(memory.download(plan.spec(name)) for name in plan.outputs)
    return RunResult(outputs, (), images=memory.images(),
                     copies=sum(isinstance(s, CopyStep) for s in plan.steps),
                     allocated_bytes=memory.allocated_bytes)


def storage_count(planned: tvm.IRModule) -> int:
    """How many storages ``planned``'s main allocates."""
    return sum(_op_name(b.value) == "relax.memory.alloc_storage"
               for block in planned["main"].body.blocks for b in block.bindings)

