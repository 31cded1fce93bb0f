"""Threads per block for a fused loop: whole rows of its loops where they fit.

TVM's fallback and layout-transform rules fuse a kernel's spatial loops and
split the fused loop by the target's largest thread block (256).  Each block
variable is then recovered from ``blockIdx.x * 256 + threadIdx.x`` by a
division and a remainder, and where 256 cuts a row of the output (a max pool
over 28 x 28 x 4 texel lanes, rows of 112) neither term folds away: TVM's
simplifier works through those chains in every lowering pass that simplifies
(23 ms to lower inception's max pool), and every GPU thread evaluates them.

A block of threads that covers whole rows, or a whole divisor of one row,
keeps the recovery to ``threadIdx.x % 112``, ``threadIdx.x >> 2``,
``blockIdx.x % 14``: the pool's OpenCL kernel then computes 6 remainders
and 3 divisions instead of 12 and 9, and lowers in about half the time (a
layout transform in 10 to 40% less).  :func:`aligned_threads` picks the
largest such count up to the limit.  Where the loops leave only small ones
(prime extents), and where an extent is symbolic, it keeps the limit, as
TVM's rules do.

On an NVIDIA H200 (NVIDIA's OpenCL, kernel times, medians of 25, three
rounds) the zoo's networks and MediaPipe's hand_landmark_full,
face_landmark and selfie_segmentation ran within the rounds' spread (about
10%) of the 256-thread build; on the MediaPipe models, one to four launches
change at all.  No phone has timed it yet.
"""

from __future__ import annotations

import math

from tvm import tirx

# A block smaller than this fills too few of a GPU's lanes (Adreno's waves
# are 64 or 128 wide); below it, a kernel with more work than one block
# keeps the rules' full blocks.
SMALLEST_BLOCK = 64


def divisors_down(n: int) -> list[int]:
    """The divisors of ``n``, largest first."""
    return [d for d in range(n, 0, -1) if n % d == 0]


def aligned_threads(extents, limit: int) -> int:
    """Threads per block for a loop fused from loops of ``extents`` (outer to
    inner): the largest count up to ``limit`` that is the product of the
    innermost extents times a divisor of the next; ``limit`` where an extent
    is symbolic, or where that count is below :data:`SMALLEST_BLOCK` on a
    loop longer than ``limit``."""
    if not all(isinstance(e, (int, tirx.IntImm)) for e in extents):
        return limit
    sizes = [int(e) for e in extents]
    total = math.prod(sizes)
    if total <= limit:
        return max(total, 1)
    best = 1
    for position, size in enumerate(sizes):
        inner = math.prod(sizes[position + 1:])
        if inner > limit:
            continue
        best = max(best, next(inner * d for d in divisors_down(size) if inner * d <= limit))
    return best if best >= SMALLEST_BLOCK else limit
