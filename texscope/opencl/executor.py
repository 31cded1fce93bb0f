"""Run a texscope build on an OpenCL device.

Three parts, each readable alone: the program walk (``program.py``: which
calls and copies run, on which tensors), memory by scope (``memory.py``:
images for textures, buffers otherwise) and the launches (``launches.py``:
kernel, arguments and work sizes from the lowered TIR).  The planner is not
consulted: scopes come from the built module's types, and a kernel that
declares an image for a tensor held in a buffer (or the reverse) is an error.
"""

from __future__ import annotations


import attrs
import numpy as np

from ..errors import TexscopeError
from .launches import Launch, ScalarArg, WorkspaceArg, kernel_launches
from .memory import DeviceMemory
from .program import KernelCall, TensorSpec, read_program
from .source import compiled, default_device, kernel_signatures, pyopencl


@attrs.frozen
class KernelTime:
    """One command of the run, timed by OpenCL profiling events."""

    binding: str
    kernel: str
    seconds: float


@attrs.frozen
class RunResult:
    """Outputs of :func:`run` and what it took."""

    outputs: tuple[np.ndarray, ...] = attrs.field(eq=False)
    times: tuple[KernelTime, ...]
    images: int
    copies: int

    def slowest(self) -> list[KernelTime]:
        return sorted(self.times, key=lambda t: -t.seconds)


def _scalar(arg: ScalarArg):
    return np.dtype(arg.dtype).type(arg.value)


class _Launcher:
    def __init__(self, cl, program, memory: DeviceMemory, source: str):
        self.cl = cl
        self.program = program
        self.memory = memory
        self.kernels: dict[str, object] = {}
        self.declared = {name: [p.strip() for p in params.split(",")]
                         for name, params in kernel_signatures(source).items()}

    def _check_declaration(self, launch: Launch, position: int, tensor: TensorSpec, binding: str):
        """An image parameter must hold a texture, a pointer a buffer."""
        declared = self.declared[launch.kernel][position]
        if tensor.is_texture != ("image2d_array_t" in declared):
            raise TexscopeError(
                f"kernel {launch.kernel} declares `{declared}` for {tensor.name}, held in "
                f"{tensor.scope!r}; the executor makes image2d_array_t images for textures "
                "and buffers otherwise", "main", binding)

    def kernel(self, name: str, binding: str):
        if name not in self.kernels:
            if name not in self.program.kernel_names.split(";"):
                raise TexscopeError(f"kernel {name} is not in the OpenCL source", "main", binding)
            self.kernels[name] = self.cl.Kernel(self.program, name)
        return self.kernels[name]

    def run(self, call: KernelCall, launch: Launch):
        kernel = self.kernel(launch.kernel, call.binding)
        for position, arg in enumerate(launch.args):
            if isinstance(arg, ScalarArg):
                kernel.set_arg(position, _scalar(arg))
                continue
            if isinstance(arg, WorkspaceArg):
                kernel.set_arg(position, self.memory.workspace((call.binding, arg.name), arg.nbytes))
                continue
            tensor = call.tensors[arg.index]
            if tensor.scope != arg.scope:
                raise TexscopeError(
                    f"kernel {launch.kernel} takes {tensor.name} as {arg.scope!r} but the "
                    f"program holds it in {tensor.scope!r}", "main", call.binding)
            self._check_declaration(launch, position, tensor, call.binding)
            kernel.set_arg(position, self.memory.allocate(tensor))
        return self.cl.enqueue_nd_range_kernel(
            self.memory.queue, kernel, launch.global_size, launch.local_size)


def run(result, inputs, device=None) -> RunResult:
    """Execute a :func:`texscope.build` result on an OpenCL device.

    Parameters
    ----------
    result : BuildResult
        An OpenCL build (``result.kernels`` and ``result.opencl_source`` set).
    inputs : sequence of numpy arrays
        One per parameter of ``main``.
    device : pyopencl.Device, optional
        The first device found by default.

    Returns
    -------
    RunResult
    """
    cl = pyopencl()
    if result.kernels is None or not result.opencl_source:
        raise TexscopeError("this build has no OpenCL kernels to run (was it built for OpenCL?)")
    program = read_program(result.module)
    launches = kernel_launches(result.kernels)
    if len(inputs) != len(program.inputs):
        raise TexscopeError(f"main takes {len(program.inputs)} inputs, got {len(inputs)}")
    device = device or default_device()
    context, kernels = compiled(result.opencl_source, device)
    queue = cl.CommandQueue(context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    memory = DeviceMemory(cl, context, queue)
    for item in program.inputs:
        memory.upload(item.tensor, inputs[item.index])
    for constant in program.constants:
        memory.upload(constant.tensor, constant.value)
    launcher = _Launcher(cl, kernels, memory, result.opencl_source)
    events = []
    for step in program.steps:
        if isinstance(step, KernelCall):
            if step.function not in launches:
                raise TexscopeError(f"{step.function} was not lowered to kernels", "main", step.binding)
            events += [(step.binding, launch.kernel, launcher.run(step, launch))
                       for launch in launches[step.function]]
        else:
            events.append((step.binding, "to_vdevice", memory.copy(step.source, step.target)))
    outputs = tuple(memory.download(spec) for spec in program.outputs)
    times = tuple(
        KernelTime(binding, kernel, (event.profile.end - event.profile.start) * 1e-9)
        for binding, kernel, event in events
    )
    return RunResult(
        outputs, times,
        images=sum(isinstance(spec, TensorSpec) and spec.is_texture for spec in memory.objects),
        copies=sum(kernel == "to_vdevice" for _, kernel, _ in events),
    )
