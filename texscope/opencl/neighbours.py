"""What a kernel of a model meets and the same kernel in a tuning set does not.

In a model, a kernel reading an image reads what the kernel before it just
wrote, and the image it writes was read a moment ago by another kernel.  In
a tuning set's program the variants run one after another on operands
uploaded at the start.  On an H200 (NVIDIA's OpenCL, ``bench/texel_fetch.py``)
a 1x1 conv reading the image the kernel before wrote took 1.10x the buffer
kernel's time, 0.93x where all read one image written long before; a weight
layout transform writing an image took 19.8 us in chain64's program and
7.3 us in its tuning set (docs/benchmarks.md).

:class:`Neighbours` gives a session's kernels those neighbours, untimed:
before each launch, every image it reads is rewritten with its own texels
from a clone (a kernel's write, the data unchanged), and every image it
writes is read.  ``python -m texscope.opencl.tune`` times texture variants so.
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

// Reads every texel; the store (never taken for the texels a model holds)
// keeps the compiler from dropping the reads.
__kernel void texscope_read_image(__read_only image2d_array_t image, __global float* sink) {
  const int4 at = (int4)(get_global_id(0), get_global_id(1), get_global_id(2), 0);
  const float4 texel = read_imagef(image, NEIGHBOUR_SAMPLER, at);
  if (texel.x == 1234.5f && texel.y == -1234.5f) sink[0] = texel.z;
}
"""


class Neighbours:
    """Untimed kernels before each launch of ``session`` that reads or
    writes an image (see the module docstring): :attr:`before` maps a
    command's index to their enqueuing callables, for
    :meth:`texscope.opencl.session.Session.profiled`.  The clones take the
    images' texels when made: make them after a run has written them."""

    def __init__(self, session):
        cl = self.cl = pyopencl()
        self.session = session
        memory = session.memory
        self.queue = session.queue
        program = cl.Program(memory.context, SOURCE).build()
        self._rewrite = cl.Kernel(program, "texscope_rewrite_image")
        self._read = cl.Kernel(program, "texscope_read_image")
        self._sink = cl.Buffer(memory.context, cl.mem_flags.READ_WRITE, size=4)
        self._clones: dict = {}
        self.before: dict[int, list] = {}
        declared = session.launcher.declared
        for index, step in enumerate(session.plan.steps):
            if not isinstance(step, KernelStep):
                continue
            touches = []
            for position, arg in enumerate(step.args):
                if not isinstance(arg, TensorArg) or not session.plan.spec(arg.tensor).is_texture:
                    continue
                spec = session.plan.spec(arg.tensor)
                qualifier = declared[step.kernel][position]
                if "__read_only" in qualifier or "read_only " in qualifier:
                    touches.append(self._rewriting(spec))
                elif "__write_only" in qualifier or "write_only " in qualifier:
                    touches.append(self._reading(spec))
            if touches:
                self.before[index] = touches

    def _rewriting(self, spec):
        cl, memory = self.cl, self.session.memory
        image, extent = memory.objects[spec], image_extent(spec)
        if spec not in self._clones:
            clone = cl.create_image(memory.context, cl.mem_flags.READ_WRITE, image.format,
                                    shape=extent, is_array=True)
            cl.enqueue_copy(self.queue, clone, image, src_origin=(0, 0, 0),
                            dest_origin=(0, 0, 0), region=extent)
            self._clones[spec] = clone
        clone, kernel = self._clones[spec], self._rewrite

        def enqueue():
            kernel.set_args(clone, image)
            return cl.enqueue_nd_range_kernel(self.queue, kernel, extent, None)
        return enqueue

    def _reading(self, spec):
        cl = self.cl
        image, extent, kernel = self.session.memory.objects[spec], image_extent(spec), self._read

        def enqueue():
            kernel.set_args(image, self._sink)
            return cl.enqueue_nd_range_kernel(self.queue, kernel, extent, None)
        return enqueue

    @property
    def launches(self) -> int:
        """Untimed launches a run adds."""
        return sum(len(touches) for touches in self.before.values())
