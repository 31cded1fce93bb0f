"""What a kernel of a model meets and the same kernel in a tuning set does not.

In a model, a kernel reads the maps the kernels before it just wrote (in the
GPU's caches; an image so written also costs more to read), its weights were
last touched an inference ago, and the image it writes was read a moment ago
by another kernel.  In a tuning set's program the variants run one after
another on operands uploaded at the start.  On an H200 (NVIDIA's OpenCL,
``bench/texel_fetch.py``) a 1x1 conv reading the image the kernel before
wrote took 1.10x the buffer kernel's time, 0.93x where all read one image
written long before; hand_landmark_full's 1x1 convs of 1152 channels, whose
weights (884 KB) outweigh their maps, took 114 us in the model from buffers,
114 in its set run as it is and 67 run twice in a row (docs/benchmarks.md).

:class:`Neighbours` gives a session's kernels those neighbours, untimed:
before each launch every map it reads (not the tensors named ``untouched``:
the weights) is rewritten with its own contents from a clone by a kernel,
and every image it writes is read.  ``python -m texscope.opencl.tune``
prices every variant so.
"""

from __future__ import annotations

from .memory import image_extent
from .plan import KernelStep, TensorArg
from .source import pyopencl

SOURCE = r"""
__constant sampler_t NEIGHBOUR_SAMPLER =
    CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_CLAMP_TO_EDGE | CLK_FILTER_NEAREST;

__kernel void texscope_rewrite_image(__read_only image2d_array_t clone,
                                     __write_only image2d_array_t image) {
  const int4 at = (int4)(get_global_id(0), get_global_id(1), get_global_id(2), 0);
  write_imagef(image, at, read_imagef(clone, NEIGHBOUR_SAMPLER, at));
}

__kernel void texscope_rewrite_buffer(__global const uchar* clone, __global uchar* buffer) {
  buffer[get_global_id(0)] = clone[get_global_id(0)];
}

// Reads every texel; the store (never taken for the texels a model holds)
// keeps the compiler from dropping the reads.
__kernel void texscope_read_image(__read_only image2d_array_t image, __global float* sink) {
  const int4 at = (int4)(get_global_id(0), get_global_id(1), get_global_id(2), 0);
  const float4 texel = read_imagef(image, NEIGHBOUR_SAMPLER, at);
  if (texel.x == 1234.5f && texel.y == -1234.5f) sink[0] = texel.z;
}
"""


class Neighbours:
    """Untimed kernels before each launch of ``session`` (see the module
    docstring): :attr:`before` maps a command's index to their enqueuing
    callables, for :meth:`texscope.opencl.session.Session.profiled`.
    ``untouched``: tensor names left alone (the weights).  The clones take
    the tensors' contents when made: make them after a run has written them."""

    def __init__(self, session, untouched=frozenset()):
        cl = self.cl = pyopencl()
        self.memory, self.queue = session.memory, session.queue
        program = cl.Program(self.memory.context, SOURCE).build()
        self._kernels = {name: cl.Kernel(program, f"texscope_{name}")
                         for name in ("rewrite_image", "rewrite_buffer", "read_image")}
        self._sink = cl.Buffer(self.memory.context, cl.mem_flags.READ_WRITE, size=4)
        self._clones: dict = {}
        self.before: dict[int, list] = {}
        declared, plan = session.launcher.declared, session.plan
        for index, step in enumerate(plan.steps):
            if not isinstance(step, KernelStep):
                continue
            touches = []
            for position, arg in enumerate(step.args):
                if not isinstance(arg, TensorArg) or arg.tensor in untouched:
                    continue
                spec = plan.spec(arg.tensor)
                qualifier = declared[step.kernel][position]
                # A buffer's direction is not declared: the program's inputs
                # are what its kernels read (a tuning set's are).
                reads = "read_only" in qualifier if spec.is_texture else arg.tensor in plan.inputs
                if reads:
                    touches.append(self._rewriting(spec))
                elif spec.is_texture and "write_only" in qualifier:
                    touches.append(self._launch("read_image", self.memory.objects[spec],
                                                self._sink, spec))
            if touches:
                self.before[index] = touches

    def _rewriting(self, spec):
        """A launch rewriting ``spec``'s memory from its clone (made now)."""
        cl, memory = self.cl, self.memory
        target = memory.objects[spec]
        if spec not in self._clones:
            if spec.is_texture:
                extent = image_extent(spec)
                clone = cl.create_image(memory.context, cl.mem_flags.READ_WRITE, target.format,
                                        shape=extent, is_array=True)
                cl.enqueue_copy(self.queue, clone, target, src_origin=(0, 0, 0),
                                dest_origin=(0, 0, 0), region=extent)
            else:
                clone = cl.Buffer(memory.context, cl.mem_flags.READ_WRITE, size=target.size)
                cl.enqueue_copy(self.queue, clone, target)
            self._clones[spec] = clone
        name = "rewrite_image" if spec.is_texture else "rewrite_buffer"
        return self._launch(name, self._clones[spec], target, spec)

    def _launch(self, name: str, first, second, spec):
        """An enqueuing callable of kernel ``name`` on (``first``,
        ``second``), over ``spec``'s texels (an image) or bytes (a buffer)."""
        cl, kernel = self.cl, self._kernels[name]
        size = image_extent(spec) if spec.is_texture else (self.memory.objects[spec].size,)

        def enqueue():
            kernel.set_args(first, second)
            return cl.enqueue_nd_range_kernel(self.queue, kernel, size, None)
        return enqueue

    @property
    def launches(self) -> int:
        """Untimed launches a run adds."""
        return sum(len(touches) for touches in self.before.values())
