"""What a texel fetch costs against a buffer load, on one OpenCL device.

A packed map ``[1, L, H, W, 4]`` read the way a 1x1 conv's thread reads its
input (one thread a pixel, every channel block in turn) and summed, one
kernel per storage and schedule:

- ``buffer``: float4 loads, one after the other; ``buffer, N ahead``: N
  loads issued before their sum (the ``nvidia`` preset's ``conv_texels_ahead``),
  a load past the last channel block clamped to it as an image's layer is;
- ``image``: ``read_imagef`` from an ``image2d_array_t`` (RGBA float) the
  same way, and ``image, N ahead``;
- ``image, N ahead, image out``: the sum written to an image, not a buffer.

Then a chain of ``--chain`` kernels of a 1x1 conv's shape (a thread a
pixel and output channel block, N texels ahead, weights from a buffer),
each reading the map the one before wrote, two maps taking turns, in
buffers and in images (``chain: buffers``, ``chain: images``, and
``chain: images, half``: RGBA half-float texels; ``chain: ..., staged``:
a work-group of up to 4 x 4 pixels and 16 output channel blocks fetching
16 channel blocks of its pixels into local memory at a time, each texel
once a work-group, every thread summing them from there); and as many
kernels each reading one map written before them all (``fan: ...``): the
median kernel's time, the last map checked against numpy.

Each kernel's median time over ``--repeat`` runs (OpenCL profiling events),
and its ratio to ``buffer`` (a chain's or fan's images: to its buffers).  The data stays in the device's caches between
runs: what is measured is the wait for each fetch (the latency a phone
model's few threads cannot hide), not memory bandwidth.  Run where the GPU
is (numpy and pyopencl only):

    python bench/texel_fetch.py [WxHxL ...] [--device N] [--ahead N] [--chain K] [--markdown]

Map sizes default to 12x12x64, 24x24x64 and 64x64x64 (width, height,
channel blocks).
"""

from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np

from texscope.errors import TexscopeError
from texscope.opencl.source import pick_device, pyopencl
from _cli import Recorded, add_markdown_option, device_line, markdown_table

SOURCE = r"""
__constant sampler_t SMP = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_CLAMP | CLK_FILTER_NEAREST;
#define AT(l) (((l) * get_global_size(1) + get_global_id(1)) * get_global_size(0) + get_global_id(0))
#define TEXEL(l) (int4)(get_global_id(0), get_global_id(1), (l), 0)
#define FROM_BUFFER(l) in[AT(l)]
#define FROM_IMAGE(l) read_imagef(in, SMP, TEXEL(l))
#define ONE(l) 1.0f
#define WEIGHT(l) weight[l]

__kernel void buffer(__global const float4* restrict in, __global float4* restrict out, int L) {
  float4 sum = 0.0f;
  for (int l = 0; l < L; ++l) sum += FROM_BUFFER(l);
  out[AT(0)] = sum;
}

// The sum of LOAD(l) * SCALE(l) over the L channel blocks, AHEAD loads
// issued before their sums; a load past the last block reads the last one
// (as an image's layer clamps) and is not summed.
#define SUM_AHEAD(LOAD, SCALE)                                                    \
  float4 sum = 0.0f;                                                              \
  for (int l0 = 0; l0 < L; l0 += AHEAD) {                                         \
    float4 v[AHEAD];                                                              \
    _Pragma("unroll")                                                             \
    for (int i = 0; i < AHEAD; ++i) v[i] = LOAD(min(l0 + i, L - 1));              \
    _Pragma("unroll")                                                             \
    for (int i = 0; i < AHEAD; ++i) sum += l0 + i < L ? v[i] * SCALE(l0 + i) : 0.0f; \
  }

__kernel void buffer_ahead(__global const float4* restrict in, __global float4* restrict out, int L) {
  SUM_AHEAD(FROM_BUFFER, ONE)
  out[AT(0)] = sum;
}

__kernel void image(__read_only image2d_array_t in, __global float4* restrict out, int L) {
  float4 sum = 0.0f;
  for (int l = 0; l < L; ++l) sum += FROM_IMAGE(l);
  out[AT(0)] = sum;
}

__kernel void image_ahead(__read_only image2d_array_t in, __global float4* restrict out, int L) {
  SUM_AHEAD(FROM_IMAGE, ONE)
  out[AT(0)] = sum;
}

__kernel void image_ahead_image_out(__read_only image2d_array_t in,
                                    __write_only image2d_array_t out, int L) {
  SUM_AHEAD(FROM_IMAGE, ONE)
  write_imagef(out, TEXEL(0), sum);
}

// A 1x1 conv's shape: every thread (x, y, c) sums its pixel's channel
// blocks, weighted, into channel block c.
__kernel void chain_buffer(__global const float4* restrict in, __global float4* restrict out,
                           __global const float* restrict weight, int L) {
  SUM_AHEAD(FROM_BUFFER, WEIGHT)
  out[AT(get_global_id(2))] = sum * (1.0f / L);
}

__kernel void chain_image(__read_only image2d_array_t in, __write_only image2d_array_t out,
                          __global const float* restrict weight, int L) {
  SUM_AHEAD(FROM_IMAGE, WEIGHT)
  write_imagef(out, TEXEL(get_global_id(2)), sum * (1.0f / L));
}

// The same 1x1 conv with its input staged in local memory: a work-group is
// a TX x TY tile of pixels times OB output channel blocks; the OB threads
// of a pixel fetch STAGE of its channel blocks together (each fetches
// STAGE / OB), then each sums all STAGE from local memory.  Each texel is
// fetched once a work-group, not once an output channel block.
#define SUM_STAGED(LOAD, SCALE)                                                   \
  __local float4 tile[STAGE][TY][TX];                                             \
  const int lx = get_local_id(0), ly = get_local_id(1), lz = get_local_id(2);     \
  float4 sum = 0.0f;                                                              \
  for (int l0 = 0; l0 < L; l0 += STAGE) {                                         \
    for (int s = lz; s < STAGE; s += OB) tile[s][ly][lx] = LOAD(min(l0 + s, L - 1)); \
    barrier(CLK_LOCAL_MEM_FENCE);                                                 \
    _Pragma("unroll")                                                             \
    for (int s = 0; s < STAGE; ++s)                                               \
      sum += l0 + s < L ? tile[s][ly][lx] * SCALE(l0 + s) : 0.0f;                  \
    barrier(CLK_LOCAL_MEM_FENCE);                                                 \
  }

__kernel __attribute__((reqd_work_group_size(TX, TY, OB)))
void staged_buffer(__global const float4* restrict in, __global float4* restrict out,
                   __global const float* restrict weight, int L) {
  SUM_STAGED(FROM_BUFFER, WEIGHT)
  out[AT(get_global_id(2))] = sum * (1.0f / L);
}

__kernel __attribute__((reqd_work_group_size(TX, TY, OB)))
void staged_image(__read_only image2d_array_t in, __write_only image2d_array_t out,
                  __global const float* restrict weight, int L) {
  SUM_STAGED(FROM_IMAGE, WEIGHT)
  write_imagef(out, TEXEL(get_global_id(2)), sum * (1.0f / L));
}
"""

#: (row title, kernel, input in an image, output in an image)
VARIANTS = (("buffer", "buffer", False, False),
            ("buffer, {n} ahead", "buffer_ahead", False, False),
            ("image", "image", True, False),
            ("image, {n} ahead", "image_ahead", True, False),
            ("image, {n} ahead, image out", "image_ahead_image_out", True, True))
DEFAULT_MAPS = ("12x12x64", "24x24x64", "64x64x64")


def map_size(text: str) -> tuple[int, int, int]:
    """``WxHxL`` as (width, height, channel blocks); a TexscopeError otherwise."""
    parts = text.split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise TexscopeError(f"{text}: not a map size WxHxL (width, height, channel blocks)")
    return tuple(int(p) for p in parts)


def staging(size: tuple[int, int, int]) -> dict[str, int]:
    """The staged kernels' work-group (a tile of TX x TY pixels, OB output
    channel blocks) and the channel blocks STAGE fetched together: tiles of
    4 x 4 where they divide the map, 16 blocks where they divide its layers."""
    width, height, layers = size
    side = lambda extent: next(d for d in (4, 2, 1) if extent % d == 0)
    return {"TX": side(width), "TY": side(height),
            "OB": next(d for d in (16, 8, 4, 2, 1) if layers % d == 0), "STAGE": 16}


def measure(device, size: tuple[int, int, int], ahead: int, repeat: int,
            chain_length: int) -> list[tuple]:
    """(title, seconds, matches the buffer kernel's sum) of each variant on one map."""
    cl = pyopencl()
    width, height, layers = size
    context = cl.Context([device])
    queue = cl.CommandQueue(context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    program = cl.Program(context, SOURCE).build(
        options=f"-DAHEAD={ahead} " + " ".join(f"-D{k}={v}" for k, v in staging(size).items()))
    texels = np.random.default_rng(0).random((layers, height, width, 4), dtype=np.float32)
    flags, fmt = cl.mem_flags, cl.ImageFormat(cl.channel_order.RGBA, cl.channel_type.FLOAT)
    buffer_in = cl.Buffer(context, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=texels)
    image_in = cl.create_image(context, flags.READ_ONLY, fmt, shape=(width, height, layers),
                               is_array=True)
    cl.enqueue_copy(queue, image_in, texels, origin=(0, 0, 0), region=(width, height, layers))
    buffer_out = cl.Buffer(context, flags.READ_WRITE, width * height * 16)
    image_out = cl.create_image(context, flags.READ_WRITE, fmt, shape=(width, height, 1),
                                is_array=True)
    expected = texels.sum(axis=0)
    rows = []
    for title, name, reads_image, writes_image in VARIANTS:
        kernel = cl.Kernel(program, name)
        out = image_out if writes_image else buffer_out
        kernel.set_args(image_in if reads_image else buffer_in, out, np.int32(layers))
        seconds = []
        for _ in range(repeat + 3):  # the first three warm up
            event = cl.enqueue_nd_range_kernel(queue, kernel, (width, height), None)
            event.wait()
            seconds.append((event.profile.end - event.profile.start) * 1e-9)
        got = np.empty((height, width, 4), np.float32)
        if writes_image:
            cl.enqueue_copy(queue, got, out, origin=(0, 0, 0), region=(width, height, 1))
        else:
            cl.enqueue_copy(queue, got, out)
        queue.finish()
        rows.append((title.format(n=ahead), statistics.median(seconds[3:]),
                     bool(np.allclose(got, expected, rtol=1e-5, atol=1e-5))))
    rows += chain(cl, context, queue, program, size, chain_length, repeat)
    return rows


def chain(cl, context, queue, program, size, length: int, repeat: int) -> list[tuple]:
    """(title, median kernel seconds, matches numpy) of ``length`` kernels
    of a 1x1 conv's shape in a row, in buffers and in images: each reading
    what the one before wrote (``chain``), or each reading one map written
    before them all (``fan``), so that what an image costs as the kernel
    before's output shows apart from what it costs to read."""
    width, height, layers = size
    flags, fmt = cl.mem_flags, cl.ImageFormat(cl.channel_order.RGBA, cl.channel_type.FLOAT)
    rng = np.random.default_rng(1)
    first = rng.random((layers, height, width, 4), dtype=np.float32)
    weight = rng.random(layers, dtype=np.float32)

    def steps(count: int) -> np.ndarray:
        out = first
        for _ in range(count):
            out = np.broadcast_to(np.tensordot(weight, out, axes=1) / layers, first.shape)
        return out

    weights = cl.Buffer(context, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=weight)
    rows = []
    half = cl.ImageFormat(cl.channel_order.RGBA, cl.channel_type.HALF_FLOAT)
    tile = staging(size)
    for title, name, images, fan in (("chain: buffers", "chain_buffer", False, False),
                                     ("chain: images", "chain_image", fmt, False),
                                     ("chain: images, half", "chain_image", half, False),
                                     ("chain: buffers, staged", "staged_buffer", False, False),
                                     ("chain: images, staged", "staged_image", fmt, False),
                                     ("fan: buffers", "chain_buffer", False, True),
                                     ("fan: images", "chain_image", fmt, True)):
        local = (tile["TX"], tile["TY"], tile["OB"]) if name.startswith("staged") else None
        if images:
            maps = [cl.create_image(context, flags.READ_WRITE, images,
                                    shape=(width, height, layers), is_array=True)
                    for _ in range(3)]
        else:
            maps = [cl.Buffer(context, flags.READ_WRITE, first.nbytes) for _ in range(3)]
        # chain: map 0 -> 1 -> 0 -> ...; fan: map 0 -> 1, 0 -> 2, 0 -> 1, ...
        flow = ([(0, 1 + step % 2) for step in range(length)] if fan else
                [(step % 2, (step + 1) % 2) for step in range(length)])
        kernels = []
        for source, target in flow:
            kernel = cl.Kernel(program, name)
            kernel.set_args(maps[source], maps[target], weights, np.int32(layers))
            kernels.append(kernel)
        medians = []
        for run in range(max(repeat // 5, 1) + 1):  # the first run warms up
            if images:
                cl.enqueue_copy(queue, maps[0], first.astype(np.float16) if images is half
                                else first, origin=(0, 0, 0), region=(width, height, layers))
            else:
                cl.enqueue_copy(queue, maps[0], first)
            events = [cl.enqueue_nd_range_kernel(queue, kernel, (width, height, layers), local)
                      for kernel in kernels]
            queue.finish()
            if run:
                medians.append(statistics.median((e.profile.end - e.profile.start) * 1e-9
                                                 for e in events))
        got = np.empty_like(first, dtype=np.float16 if images is half else np.float32)
        last = maps[flow[-1][1]]
        if images:
            cl.enqueue_copy(queue, got, last, origin=(0, 0, 0), region=(width, height, layers))
        else:
            cl.enqueue_copy(queue, got, last)
        queue.finish()
        expected = steps(1 if fan else length)
        tolerance = 1e-2 if images is half else 1e-4  # half: 11 bits a texel channel
        rows.append((title, statistics.median(medians),
                     bool(np.allclose(got, expected, rtol=tolerance, atol=tolerance / 10))))
    return rows


def base_of(title: str) -> str:
    """The row a row's time is a ratio to: a chain's or fan's buffers, else ``buffer``."""
    kind = title.partition(":")[0]
    return f"{kind}: buffers" if kind in ("chain", "fan") else "buffer"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("maps", nargs="*", metavar="WxHxL",
                        help=f"map sizes (default: {' '.join(DEFAULT_MAPS)})")
    parser.add_argument("--device", type=int, help="OpenCL device index")
    parser.add_argument("--ahead", type=int, default=16, help="texels fetched ahead (default 16)")
    parser.add_argument("--repeat", type=int, default=25)
    parser.add_argument("--chain", type=int, default=64,
                        help="kernels in the chain (default 64)")
    add_markdown_option(parser)
    args = parser.parse_args(argv)
    try:
        sizes = [map_size(text) for text in args.maps or DEFAULT_MAPS]
        if not 1 <= args.ahead <= 64:
            raise TexscopeError(f"--ahead {args.ahead}: between 1 and 64")
        device = pick_device(args.device)
        if args.chain < 1:
            raise TexscopeError(f"--chain {args.chain}: at least 1")
        measured = {size: measure(device, size, args.ahead, args.repeat, args.chain)
                    for size in sizes}
    except TexscopeError as err:
        parser.error(str(err))
    with Recorded(args.markdown, "texel_fetch.py", device_line(device), raw=True):
        rows = []
        for (width, height, layers), found in measured.items():
            bases = {title: seconds for title, seconds, _ in found}
            rows += [(f"{width}x{height}x{layers}", title, f"{seconds * 1e6:.2f}",
                      f"{seconds / bases[base_of(title)]:.2f}", "yes" if ok else "NO")
                     for title, seconds, ok in found]
        print("\n".join(markdown_table(("map", "kernel", "us", "to buffer", "right sum"), rows)))
    return 0 if all(ok for found in measured.values() for *_, ok in found) else 1


if __name__ == "__main__":
    sys.exit(main())
