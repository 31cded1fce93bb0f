"""The packed conv's schedule: TVM's Adreno ``Conv2d`` rule, step for step,
with the guards of its non-dividing splits appended once, its rows and
columns tiled to fit the map, and its input padded in registers.

TVM's rule puts 16 x 16 threads on every tile of the output.  On the 28 x 28
and 14 x 14 maps of 224-pixel models (and 24, 12, 6, 3 of 192-pixel ones)
16 leaves a remainder: threads that only test their guard, 23% of a 28 x 28
map's, 75% of a 7 x 7 one's.  Here a tile takes the extent itself up to 16,
else its largest divisor from 16 down to 8 (:func:`spatial_tile`), and 16,
guarded, only where none divides.  Replayed on an NVIDIA H200 (NVIDIA's
OpenCL, medians of 15, both orders twice, the same outputs), the zoo's
inception ran 0.36 ms against 0.78 to 0.82, mobilenet_v2 0.47 to 0.48
against 0.76 to 0.78, chain64 8.6 against 24.0; MediaPipe's
hand_landmark_full 8.3 against 16.7, face_landmark 2.2 to 2.4 against 3.6
to 4.0.  The builds are shorter too (fewer guards to lower).  No phone has
timed it yet; a tile of 14 x 14 threads fills whole 64-lane waves no worse
than 16 x 16 with a quarter idle.

A ``split`` whose factors do not divide the loop appends a guard to the
block under it (``T.where(outer * 16 + inner < extent)``), after a proof
that fails and costs TVM 0.27 a Z3 solver (:mod:`texscope.backend.schedules.guards`):
about 4 ms a split, against 0.2 ms for one that divides.  The Adreno rule
splits the output channels by 8, the rows and columns by 16 and the input
channels by 4, so on the small feature maps of phone models nearly every
split guards.  Here the splits run unguarded; the input texel's and the
accumulators' register caches are moved under the conv's loops by
:mod:`texscope.backend.schedules.cache_bounds`, which spares their moves the bound
proofs that fail where the tiles overhang the map (another Z3 solver each);
then the guards, built as ``split`` builds them, go on the conv block in one
replacement; a block left to TVM's default schedule (a data pad) gets
:mod:`texscope.backend.schedules.fallback`'s, guarded alike.  The scheduled
kernel is the one TVM's rule makes with those tiles (the tests compare them
on every conv kernel of the zoo and of the MediaPipe models), but where an epilogue also
reads the conv's input: there TVM's rule fails, and here the register cache
serves the conv alone; and where an epilogue block writes more than the conv
(a gate times a feature map), which TVM's rule leaves off the GPU threads and
this schedule gives the default schedule
(:func:`texscope.backend.schedules.fallback.inline_blocks`).

TVM's rule leaves a conv's zero padding to a kernel of its own, which
writes the padded map to a global scratch buffer that the conv then reads
into its register cache.  Where each thread's step of the reduction reads
one input texel (the input channel does not follow the output channel, as
it does in a depthwise conv), the padding block itself is the register
cache here (:func:`register_padding`): it reads the texel under the bounds
test the padding kernel made and fills in the zero, so the scratch buffer,
its kernel and its launch are gone; the sums are unchanged, term for term
(PoCL gives the same bits).  On an H200 (NVIDIA's OpenCL, kernel times,
medians of 15, twice) inception ran 0.27 ms against 0.36 to 0.39, chain64
6.0 and 6.8 against 7.5 and 8.0; mobilenet_v2, whose padded convs are
mostly depthwise, and the MediaPipe landmark models stayed within 3%.  In a
depthwise conv each thread would read a texel for each of its 8 virtual
threads' channels, each under its own bounds test: so made, its builds got
longer (hand_landmark_full's by 14%, mobilenet_v2's by 6%) and its kernel
times moved by -17% to +8%; a depthwise conv keeps TVM's padding kernel
unless the target's preset says otherwise
(``TexturePreset.depthwise_padding_in_registers``).  On a big GPU the
launches count more: MediaPipe's models are launch-bound there, and the
padding kernels were 6 to 66 of their launches (iris_landmark 26 of 116).
Without them the all-buffer builds' steady-state time per inference on an
H200 (NVIDIA's OpenCL, driver 580.159.04, ``bench/vs_litert.py``, medians
of 50, median of 3 rounds) fell 0 to 16% on nine models (hand_landmark_lite
3.49 to 3.00 ms, palm_detection_full 3.63 to 3.06, face_landmark 1.54 to
1.44), with the same outputs: the ``nvidia`` preset pads them in registers.

TVM's rule splits the input channels by a texel's 4 even where a group
reduces fewer: a depthwise conv's one.  Its register cache then spans two
texels a tap, one of them never read (``if (ic_1 < 1)``), and each tap
fetches both.  With ``exact_texels`` the split is the reduction's own
extent: one texel a tap, no guard.

Each step of TVM's rule's reduction fetches one input texel and then sums
its products, so a thread waits out every fetch in turn. Phone models'
convs run too few threads to fill a big GPU (palm_detection_full's 12 x 12
x 256 1x1 convs: 288 warps of 32 threads on the H200's 132
multiprocessors), so nothing else hides that wait. With ``texels_ahead`` a
conv reading an image fetches that many texels (of a 1x1 conv's next
channel blocks, else a row of taps or every tap) before the first sum,
unrolled. Six MediaPipe models on an H200 (NVIDIA's OpenCL,
``bench/kernel_pairs.py``, kernel time summed): texture builds 6.49 ms with
TVM's rule, 6.37 with one texel a tap, 6.32, 6.39, 6.06 and 5.95 fetching
2, 4, 9 and 16 texels ahead; buffer builds 4.69, then 4.50 with one texel a
tap, 4.54-4.55 fetching ahead (no gain: the ``nvidia`` preset fetches ahead
from images only). Nine models, the preset's builds against TVM's rule's in
interleaved rounds (two calls): texture builds 0.96-0.98x, buffer builds
0.98-0.99x, depthwise convs 0.91-0.93x in both. The texture builds stay
1.16 to 1.59x their buffer builds' time: what a texture costs there is the
image path's rate, not a fetch's wait (``bench/texel_fetch.py``,
docs/benchmarks.md).

A 1x1 conv's thread fetches its pixel's every input texel once for each
output channel block.  Staging each work-group's input texels in local
memory once, shared by 16 (or 4) output channel blocks, made those convs
1.09-1.11x (1.07x) slower in nine MediaPipe models on the H200 from images
and buffers alike, where a microbenchmark of that shape had run
0.70-0.93x from buffers (``bench/texel_fetch.py``, docs/benchmarks.md,
measured with the schedule of commit 682c50a); the schedule was not kept.
"""

from __future__ import annotations

from tvm import s_tir, tirx
from tvm.s_tir.dlight import analysis

from ...knowledge.scopes import is_texture_scope
from .cache_bounds import compute_at_bounded, reverse_compute_at_bounded
from .fallback import inline_blocks, schedule_default
from .guards import append_guards, split_unguarded, substituted
from .thread_blocks import divisors_down

# The block name TVM's Adreno Conv2d rule schedules (its legalization's).
CONV_BLOCK = "conv2d_NCHWc"

_THREADS = ("blockIdx.z", "blockIdx.y", "blockIdx.x", "vthread.z", "vthread.y", "vthread.x",
            "threadIdx.z", "threadIdx.y", "threadIdx.x")


def spatial_tile(extent) -> int:
    """Threads along the output's rows (or columns): TVM's rule's 16 where
    they divide the extent or nothing smaller does, else the extent itself up
    to 16, else its largest divisor from 15 down to 8 (28 rows: 14)."""
    if not isinstance(extent, tirx.IntImm):
        return 16
    size = int(extent)
    if size <= 16:
        return size
    return next((d for d in range(16, 7, -1) if size % d == 0), 16)


def register_padding(sch: s_tir.Schedule, conv, depthwise: bool = False):
    """The block zero-padding ``conv``'s input that is to be ``conv``'s
    register cache (see the module docstring), or None: where ``conv``
    alone reads the padded map and, unless ``depthwise``, reads one texel
    of it per step of its reduction."""
    block = sch.get(conv)
    data = block.reads[0]
    out_channel = block.iter_vars[1].var
    if not depthwise and any(var.same_as(out_channel)
                             for var in tirx.analysis.undefined_vars(data.region[1].min)):
        return None  # depthwise: the input channel follows the output channel
    for producer in sch.get_producers(conv):
        if sch.get(producer).writes[0].source.same_as(data.source):
            if analysis.get_sblock_info(sch, producer).is_data_pad(sch) \
                    and len(sch.get_consumers(producer)) == 1:
                return producer
            return None
    return None


def texel_split(extent) -> int:
    """Input channels a step of the reduction reads, as one texel: TVM's
    rule's 4, or fewer where the conv reduces fewer (a depthwise conv's one:
    split by 4, its register cache spans two texels, one of them unread)."""
    if isinstance(extent, tirx.IntImm) and int(extent) < 4:
        return int(extent)
    return 4


def texels_ahead_split(extent, ahead: int) -> int:
    """Texels of input channels fetched before their products are summed:
    the largest divisor of ``extent`` (the reduction's texel steps) up to
    ``ahead``, so that the split leaves no remainder to guard."""
    if ahead <= 1 or not isinstance(extent, tirx.IntImm):
        return 1
    return next(d for d in divisors_down(int(extent)) if d <= ahead)


def _order_reduction(sch: s_tir.Schedule, ico, kh, kw, icb, ob, texels_ahead: int):
    """Order the reduction's loops (texel steps, taps, a texel's channels,
    output lanes) and say where the register cache of the input is filled
    and which loops of the sums to unroll: at each tap, one texel (TVM's
    rule); ``texels_ahead`` > 1 fills it with the texels of that many steps
    of a 1x1 conv, or of every tap (a row of them where every tap is too
    many) of a larger one."""
    taps = [sch.get(loop).extent for loop in (kh, kw)]
    ahead = texels_ahead_split(sch.get(ico).extent, texels_ahead) if taps == [1, 1] else 1
    if ahead > 1:
        ico, ico_ahead = sch.split(ico, [None, ahead], preserve_unit_iters=True)
        sch.reorder(ico, kh, kw, ico_ahead, icb, ob)
        return kw, [ico_ahead]
    sch.reorder(ico, kh, kw, icb, ob)
    if texels_ahead > 1 and all(isinstance(t, tirx.IntImm) for t in taps):
        tap_rows, tap_columns = (int(t) for t in taps)
        if tap_rows * tap_columns <= texels_ahead:
            return ico, [kh, kw]
        if tap_columns <= texels_ahead:
            return kh, [kw]
    return kw, []


def schedule_conv_block(sch: s_tir.Schedule, block, padding=None,
                        channel_blocks: int = 8, texels_ahead: int = 1,
                        exact_texels: bool = False) -> None:
    """The Adreno rule's conv schedule: output channels over blocks and
    ``channel_blocks`` virtual threads (the rule's 8), rows and columns over
    up to 16 x 16 threads (:func:`spatial_tile`), input channels by texels,
    the input texel and the accumulators in registers; ``padding``
    (:func:`register_padding`), where given, computes the input texel in
    registers.  ``texels_ahead`` texels are fetched before their products
    are summed (:func:`texels_ahead_split`: channel blocks of a 1x1 conv; a
    row of taps, or every tap, of a larger one); ``exact_texels`` splits a
    reduction of fewer than 4 channels by its extent (:func:`texel_split`)."""
    n, oc, oh, ow, ob, ic, kh, kw = sch.get_loops(block)
    (bz, vz, tz), channels = split_unguarded(sch, oc, [None, channel_blocks, 1])
    (by, vy, ty), rows = split_unguarded(sch, oh, [None, 1, spatial_tile(sch.get(oh).extent)])
    (bx, vx, tx), columns = split_unguarded(sch, ow, [None, 1, spatial_tile(sch.get(ow).extent)])
    channel_block, blocks_of_channels = sch.get(bz).loop_var, sch.get(bz).extent
    bz = sch.fuse(n, bz, preserve_unit_iters=True)
    if channels is not None:  # fuse rewrote the channel block as this
        channels = substituted(channels, channel_block,
                                tirx.floormod(sch.get(bz).loop_var, blocks_of_channels))
    sch.reorder(bz, by, bx, vz, vy, vx, tz, ty, tx, ob)
    for loop, thread in zip((bz, by, bx, vz, vy, vx, tz, ty, tx), _THREADS):
        sch.bind(loop, thread)
    # The conv's reads only: an epilogue reading the conv's input too (a
    # residual of a 1x1 conv) would otherwise read the register cache,
    # outside the loop it is computed at (TVM's rule fails there).
    if padding is None:
        read = sch.cache_read(block, 0, "local", consumer_blocks=[block])
    else:
        sch.set_scope(padding, 0, "local")
        read = padding
    lanes = texel_split(sch.get(ic).extent) if exact_texels else 4
    (ico, icb), texels = split_unguarded(sch, ic, [None, lanes])
    fetch_at, unrolled = _order_reduction(sch, ico, kh, kw, icb, ob, texels_ahead)
    compute_at_bounded(sch, read, fetch_at, block)
    sch.vectorize(sch.get_loops(read)[-1])
    if unrolled:
        # Every fetch of the step is issued before the first product needs
        # one: unrolled loops of loads, then unrolled loops of sums.
        loops = sch.get_loops(read)
        depth = next(i for i, loop in enumerate(loops)
                     if sch.get(loop).same_as(sch.get(fetch_at)))
        for loop in [*loops[depth + 1:-1], *unrolled]:
            sch.unroll(loop)
    # Written unguarded, the conv sizes its register cache by its whole tile
    # grid, so that no bound fails; the cache gets the output's size back.
    write = sch.cache_write(block, 0, "local")
    reverse_compute_at_bounded(sch, write, tx, block, sch.get(write).writes[0].source.shape)
    guards = [g for g in (channels, rows, columns, texels) if g is not None]
    if guards:
        append_guards(sch, block, guards)
    sch.vectorize(sch.get_loops(write)[-1])
    init = sch.decompose_reduction(block, tx)
    sch.vectorize(sch.get_loops(init)[-1])


def schedule_packed_conv(sch: s_tir.Schedule, depthwise_padding: bool = False,
                         channel_blocks: int = 8, texels_ahead: int = 1,
                         exact_texels: bool = False) -> s_tir.Schedule | None:
    """What TVM's Adreno ``Conv2d`` rule makes of a kernel: None unless its
    only reduction block is a packed conv; else the conv scheduled (its
    padding in registers where :func:`register_padding` finds it, a
    depthwise conv's too with ``depthwise_padding``; ``channel_blocks``
    output channel blocks a thread; ``texels_ahead`` input texels fetched
    before they are summed where the input is an image, ``exact_texels``
    for a conv reducing fewer than 4 channels a group: see
    :class:`texscope.knowledge.targets.TexturePreset`), the other blocks
    inlined where they can be and the rest given the default schedule."""
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    reductions = [b for b in blocks if analysis.get_sblock_info(sch, b).is_reduction()]
    if len(reductions) != 1 or CONV_BLOCK not in sch.get(reductions[0]).name_hint:
        return None
    padding = register_padding(sch, reductions[0], depthwise_padding)
    padding_name = sch.get(padding).name_hint if padding is not None else None
    others = [b for b in blocks if b not in reductions and sch.get(b).name_hint != padding_name]
    # The texture unit's latency is what fetching ahead hides; from a
    # buffer it bought nothing measurable (docs/benchmarks.md).
    from_image = is_texture_scope(sch.get(padding if padding is not None else reductions[0])
                                  .reads[0].source.scope())
    schedule_conv_block(sch, reductions[0], padding, channel_blocks,
                        texels_ahead if from_image else 1, exact_texels)
    for other in inline_blocks(sch, others):
        schedule_default(sch, other)
    return sch
