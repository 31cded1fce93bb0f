"""A plan set up on an OpenCL device once, then run as often as asked.

The steady state of an inference engine: :class:`Session` compiles the
kernels, creates every buffer and image, uploads the constants, and sets
every kernel argument once, each launch its own ``cl_kernel`` so that its
arguments stay bound.  One inference (:meth:`Session.run`) is then only

1. the inputs written into their buffers or images (non-blocking writes),
2. the plan's commands enqueued in order (kernel launches, and the copies
   between storages the plan holds),
3. the outputs read back into host arrays the session owns, and one wait
   for the queue to finish.

Nothing else happens per inference: no allocation, no argument binding, no
kernel lookup, no weight upload.  :meth:`Session.wall_times` times whole
inferences that way (host wall clock around 1-3, after warm-up runs);
``python -m texscope.opencl.replay DIR --steady N`` prints their median.

A session is for one input size: a plan of symbolic size is resolved for the
inputs it is made with.  Tensors keep their storage from run to run;
intermediate values are overwritten by each run, never read before written,
so every run's outputs depend on its own inputs only.  With ``profile=True``
the queue records OpenCL profiling events and :meth:`Session.profiled` gives
each command's device time (what the one-shot replay reports).  No TVM here.
"""

from __future__ import annotations

import time

import attrs
import numpy as np

from ..errors import TexscopeError
from .memory import DeviceMemory
from .plan import CopyStep, KernelStep, Plan, ScalarArg, TensorArg, WorkspaceArg
from .resolve import bind_sizes, resolved
from .source import compiled_kernels, default_device, kernel_signatures, pyopencl


@attrs.frozen
class KernelTime:
    """One command of the run, timed by OpenCL profiling events."""

    binding: str
    kernel: str
    seconds: float


@attrs.frozen
class RunResult:
    """Outputs of a run and what it took.

    ``allocated_bytes``: device memory the run held (every tensor, workspace
    and staging buffer its own object for the whole run: see
    :class:`texscope.opencl.memory.DeviceMemory`), not the Relax VM's peak.
    """

    outputs: tuple[np.ndarray, ...] = attrs.field(eq=False)
    times: tuple[KernelTime, ...]
    images: int
    copies: int
    allocated_bytes: int = 0

    def slowest(self) -> list[KernelTime]:
        return sorted(self.times, key=lambda t: -t.seconds)

    @property
    def seconds(self) -> float:
        """The run's device time: every command's, summed."""
        return sum(t.seconds for t in self.times)

    @property
    def launches(self) -> int:
        return len(self.times) - self.copies


class Launcher:
    """Kernels of ``plan``'s program with their arguments bound, each launch
    its own ``cl_kernel``; tensors are allocated in ``memory`` as the
    launches first name them."""

    def __init__(self, cl, programs, memory: DeviceMemory, plan: Plan):
        self.cl = cl
        self.programs = programs  # kernel name -> the program defining it
        self.memory = memory
        self.plan = plan
        self.declared = {name: [p.strip() for p in params.split(",")]
                         for name, params in kernel_signatures(plan.source).items()}

    def bound(self, step: KernelStep):
        """A kernel object for ``step`` with every argument set."""
        if step.kernel not in self.declared:
            # Known from the source, not from CL_PROGRAM_KERNEL_NAMES: NVIDIA's
            # driver (580) corrupts the heap answering that for a program of
            # many long kernel names (pose_landmark_full).
            raise TexscopeError(f"kernel {step.kernel} is not in the OpenCL source",
                                "main", step.binding)
        kernel = self.cl.Kernel(self.programs[step.kernel], step.kernel)
        for position, arg in enumerate(step.args):
            if isinstance(arg, ScalarArg):
                value = np.dtype(arg.dtype).type(arg.value)
            elif isinstance(arg, WorkspaceArg):
                value = self.memory.workspace((step.binding, arg.name), arg.nbytes)
            else:
                value = self._tensor(step, position, arg)
            kernel.set_arg(position, value)
        return kernel

    def launch(self, step: KernelStep):
        """Bind ``step``'s kernel and enqueue it; returns the event."""
        return self.cl.enqueue_nd_range_kernel(self.memory.queue, self.bound(step),
                                               step.global_size, step.local_size)

    def _tensor(self, step: KernelStep, position: int, arg: TensorArg):
        """The memory of a tensor argument, after checking that the kernel
        declares the storage the program holds it in."""
        tensor = self.plan.spec(arg.tensor)
        if tensor.scope != arg.scope:
            raise TexscopeError(
                f"kernel {step.kernel} takes {tensor.name} as {arg.scope!r} but the "
                f"program holds it in {tensor.scope!r}", "main", step.binding)
        declared = self.declared[step.kernel][position]
        if tensor.is_texture != ("image2d_array_t" in declared):
            raise TexscopeError(
                f"kernel {step.kernel} declares `{declared}` for {tensor.name}, held in "
                f"{tensor.scope!r}; textures are image2d_array_t images and buffers "
                "otherwise", "main", step.binding)
        return self.memory.allocate(tensor)


class Session:
    """``plan`` ready to run on ``device``.

    Parameters
    ----------
    plan : Plan
        From :func:`texscope.opencl.plan.read_plan`, or made from a build.
    inputs : sequence of numpy arrays, optional
        Arrays of the size to run at; needed only for a plan of symbolic size.
    device : pyopencl.Device, optional
        The first device found by default.
    profile : bool
        Record OpenCL profiling events (for :meth:`profiled`).
    jobs : int
        Programs compiled at once for a source of many kernels (see
        :func:`texscope.opencl.source.compiled_kernels`).
    context : pyopencl.Context, optional
        A context on ``device`` to hold the session (its programs, queue and
        memory), shared with other sessions; a new one by default.  Sessions
        taking turns in one context run as one application's models do.

    Raises
    ------
    TexscopeError
        A kernel missing from the source, a kernel declaring an image for a
        tensor the plan holds in a buffer (or the reverse), an image over
        the device's limits, or a compiler error.
    """

    def __init__(self, plan: Plan, inputs=None, device=None, profile: bool = False,
                 jobs: int = 1, context=None):
        cl = self.cl = pyopencl()
        if plan.is_symbolic:
            if inputs is None:
                raise TexscopeError(f"main's inputs have symbolic sizes ({', '.join(plan.sizes)}): "
                                    "give arrays of the size to run with")
            plan = resolved(plan, bind_sizes(plan, inputs))
        self.plan = plan
        self.device = device or default_device()
        context, programs = compiled_kernels(plan.source, self.device, jobs, context)
        properties = cl.command_queue_properties.PROFILING_ENABLE if profile else 0
        self.queue = cl.CommandQueue(context, properties=properties)
        self.memory = DeviceMemory(cl, context, self.queue, plan.target)
        self.launcher = Launcher(cl, programs, self.memory, plan)
        self.inputs = [plan.spec(name) for name in plan.inputs]
        self.outputs = [plan.spec(name) for name in plan.outputs]
        for spec in self.inputs:
            self.memory.allocate(spec)
        for name, array in plan.constants.items():
            self.memory.upload(plan.spec(name), array)
        # Each command: (binding, what it runs, a callable enqueuing it).
        self.commands = [self._copy(step) if isinstance(step, CopyStep) else self._launch(step)
                         for step in plan.steps]
        self.host_outputs = [np.empty(spec.shape, dtype=spec.dtype) for spec in self.outputs]
        self.queue.finish()

    @property
    def copies(self) -> int:
        return sum(isinstance(step, CopyStep) for step in self.plan.steps)

    def _copy(self, step: CopyStep):
        copy = self.memory.copier(self.plan.spec(step.source), self.plan.spec(step.target))
        return step.binding, "to_vdevice", copy

    def _launch(self, step: KernelStep):
        kernel = self.launcher.bound(step)
        queue, enqueue = self.queue, self.cl.enqueue_nd_range_kernel
        global_size, local_size = tuple(step.global_size), tuple(step.local_size)
        return step.binding, step.kernel, lambda: enqueue(queue, kernel, global_size, local_size)

    def _check(self, inputs) -> list[np.ndarray]:
        if len(inputs) != len(self.inputs):
            raise TexscopeError(f"main takes {len(self.inputs)} inputs, got {len(inputs)}")
        arrays = []
        for spec, array in zip(self.inputs, inputs):
            # Not ascontiguousarray: it makes a scalar (a rank-0 input) 1-D.
            array = np.asarray(array, dtype=spec.dtype, order="C")
            if array.shape != spec.shape:
                raise TexscopeError(f"tensor {spec.name}: expected shape {list(spec.shape)}, "
                                    f"got {list(array.shape)}")
            arrays.append(self.memory.staged(spec, array))
        return arrays

    def _inference(self, arrays, before=None) -> list:
        memory = self.memory
        for spec, array in zip(self.inputs, arrays or ()):
            memory.write(spec, array)
        events = []
        for index, (_, _, enqueue) in enumerate(self.commands):
            for untimed in (before or {}).get(index, ()):
                untimed()
            events.append(enqueue())
        for spec, host in zip(self.outputs, self.host_outputs):
            memory.read(spec, host)
        self.queue.finish()
        return events

    def run(self, inputs) -> tuple[np.ndarray, ...]:
        """One inference on ``inputs`` (one array per input of ``main``).

        The outputs are the session's own host arrays, overwritten by the
        next run: copy them to keep them.
        """
        self._inference(self._check(inputs))
        return tuple(self.host_outputs)

    def profiled(self, inputs, before=None) -> RunResult:
        """One inference, each command's device time from its profiling event
        (a session made with ``profile=True``); the outputs are copies.

        ``inputs`` None runs on what the inputs hold (the last run's, for a
        tuning set whose weights are inputs: a model uploads its weights
        once).  ``before`` maps a command's index to callables enqueuing untimed work
        ahead of it (a tuning set's :class:`~texscope.opencl.neighbours.Neighbours`)."""
        events = self._inference(None if inputs is None else self._check(inputs), before)
        times = tuple(KernelTime(binding, kernel, (event.profile.end - event.profile.start) * 1e-9)
                      for (binding, kernel, _), event in zip(self.commands, events))
        return RunResult(tuple(o.copy() for o in self.host_outputs), times,
                         images=self.memory.images(), copies=self.copies,
                         allocated_bytes=self.memory.allocated_bytes)

    def wall_times(self, inputs, runs: int, warmup: int = 3) -> list[float]:
        """Host wall-clock seconds of each of ``runs`` inferences (input
        upload, the commands, output read-back), after ``warmup`` untimed ones."""
        arrays = self._check(inputs)
        return wall_clock(lambda: self._inference(arrays), runs, warmup)


def wall_clock(call, runs: int, warmup: int = 3) -> list[float]:
    """Host wall-clock seconds of each of ``runs`` calls of ``call``, after
    ``warmup`` untimed ones (a runtime's first calls set things up)."""
    for _ in range(warmup):
        call()
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - start)
    return seconds
