"""What texscope knows about GPUs: texture limits, texture flavours, VDevices.

How a texture flavour folds a packed tensor into an image is in ``scopes.py``;
the flavour a tensor gets is the first one, in order of preference, whose
image fits the device's limits.
"""

from __future__ import annotations

import attrs
import tvm
from tvm import relax

from . import profile as cost_profile
from ..errors import TexscopeError
from .scopes import (  # noqa: F401  (re-exported: targets is where GPUs are described)
    BUFFER_SCOPE, FLAVOUR_AXES, TEXEL_LANES, describe_flavour, image_extent, is_packed_texel_shape,
    is_texture_scope,
)


@attrs.frozen
class TexturePreset:
    """Texture capabilities of a GPU family.

    Parameters
    ----------
    name : str
        Short name used on the command line.
    spatial_limit : int
        Largest image width or height, in texels (inclusive).
    depth_limit : int
        Largest number of layers in an image array (inclusive).
    flavours : tuple of str
        Texture scopes the device's kernels support, most preferred first.
    map_flavours : tuple of str or None
        The same for feature maps (a packed tensor of one batch that is not
        a weight: ``[1, C/4, H, W, 4]``); None: ``flavours``.  A map in
        ``global.texture`` is a layer per channel block with the map's rows
        and columns as the image's, so a conv's tile of threads reads a 2D
        patch of texels, what a texture cache keeps; ``global.texture-weight``
        folds it into one row of ``C/4 * H * W`` texels.
    depthwise_padding_in_registers : bool
        Whether a depthwise conv pads its input in registers rather than
        in a padding kernel of its own (``backend/schedules/conv.py``).
    conv_channel_blocks : int
        Output channel blocks (of 4) each thread of a packed conv computes,
        as virtual threads: TVM's Adreno rule's 8 keeps a phone's few
        threads busy; a GPU of many more threads than a phone model's maps
        have pixels wants fewer per thread, and more threads.
    conv_texels_ahead : int
        Input texels a packed conv reading an image fetches, a thread,
        before it sums their products (unrolled): of that many channel
        blocks in a 1x1 conv, of a row of taps or all of them in a larger
        one.  TVM's rule's 1 waits for each fetch in turn; more keep
        several in flight, which hides a texture fetch's latency where too
        few threads run to hide it.  A conv reading a buffer keeps 1.
    conv_exact_texels : bool
        Whether a conv reducing fewer than 4 input channels a group (a
        depthwise conv's one) reads that many (one texel a tap) rather
        than TVM's rule's split by 4 (two texels a tap, one unread).
    texel_pool_window : int
        The largest window (values reduced into one output) a pool writing
        a packed buffer reduces on one thread per output texel
        (``TexelWriter``); a larger one is reduced across threads (TVM's
        generic reduction rule).  A thread per texel wins on small windows
        (a 2 x 2 max pool), loses where few texels each sum a long row.
    texel_dtypes : frozenset of str
        Element types a texel may hold (RGBA float or half).
    default_profile : str
        The cost profile the planner uses unless given one: a file in
        ``texscope/knowledge/profiles/`` whose every number says where it came from
        (copy prices, what texture reads and writes save per kernel class).
    """

    name: str
    spatial_limit: int
    depth_limit: int
    flavours: tuple[str, ...] = tuple(FLAVOUR_AXES)
    map_flavours: tuple[str, ...] | None = None
    depthwise_padding_in_registers: bool = False
    conv_channel_blocks: int = 8
    conv_texels_ahead: int = 1
    conv_exact_texels: bool = False
    texel_pool_window: int = 64
    texel_dtypes: frozenset[str] = frozenset({"float32", "float16"})
    default_profile: str = "adreno"


ADRENO = TexturePreset("adreno", spatial_limit=16384, depth_limit=2048)
# Valhall-class Mali: 64K image sides, 2048 layers (CL_DEVICE_IMAGE2D_MAX_WIDTH et al.).
MALI = TexturePreset("mali", spatial_limit=65536, depth_limit=2048, default_profile="mali")
# A desktop NVIDIA GPU through NVIDIA's OpenCL (an H200: 32768-texel image
# sides, 2048 layers), launch-bound on phone models: maps kept 2D and
# depthwise convs padded in registers, nine MediaPipe models' texture
# builds ran 0 to 22% faster per inference on the H200 (driver 580.159.04,
# bench/vs_litert.py; docs/benchmarks.md), with the CPU's numbers.  A phone
# model's conv has too few output pixels to fill the H200's threads: with
# one output channel block per thread instead of TVM's 8, four MediaPipe
# models' kernel time fell to 0.33-0.51x from buffers and 0.43-0.63x from
# textures (bench/kernel_pairs.py, docs/benchmarks.md).  Its profile reads
# weights from buffers (profiles/nvidia.json says why).  The kernels are
# the Adreno target's otherwise (its keys, its schedules), but that a conv
# reading an image fetches up to 16 texels before summing them, and a
# depthwise conv reads one texel a tap, not two: nine MediaPipe models'
# depthwise convs 0.91-0.93x in both builds, convs reading images 0.93-0.98x
# (kernel time on the H200, bench/kernel_pairs.py --rounds --against, two
# calls; docs/benchmarks.md).  A pool writing a buffer reduces a window of
# more than 16 on many threads: selfie_segmentation's split global pools
# (one thread per row of 64 texels) took 0.65x the time, its all-buffer
# build 0.91x (the same replay).
NVIDIA = TexturePreset("nvidia", spatial_limit=32768, depth_limit=2048,
                       map_flavours=("global.texture", "global.texture-nhwc",
                                     "global.texture-weight"),
                       depthwise_padding_in_registers=True, conv_channel_blocks=1,
                       conv_texels_ahead=16, conv_exact_texels=True,
                       texel_pool_window=16, default_profile="nvidia")
PRESETS = {p.name: p for p in (ADRENO, MALI, NVIDIA)}

TEXTURE_KINDS = ("opencl", "vulkan")


@attrs.frozen
class TextureFit:
    """Whether a tensor can live in a texture, and why (not).

    Parameters
    ----------
    scope : str or None
        The texture flavour chosen, or None when the tensor must be a buffer.
    reason : str
        Human-readable justification.
    """

    scope: str | None
    reason: str


@attrs.frozen
class TextureTarget:
    """A texture-capable GPU target with its limits and VDevices.

    Build one with :func:`texture_target`.  ``profile`` holds the prices the
    planner weighs (:class:`texscope.knowledge.profile.CostProfile`).
    """

    target: tvm.target.Target = attrs.field(eq=False)
    kind: str
    preset: TexturePreset
    profile: cost_profile.CostProfile = attrs.field(eq=False, default=None)
    # Measured kernel and copy times (texscope.planner.tuned.MeasuredCosts):
    # with them the planner minimises measured time.
    tuning: object = attrs.field(eq=False, default=None)

    @property
    def spatial_limit(self) -> int:
        return self.preset.spatial_limit

    @property
    def depth_limit(self) -> int:
        return self.preset.depth_limit

    @property
    def device(self) -> tvm.runtime.Device:
        return tvm.device(self.kind, 0)

    def _not_texel_data(self, shape: tuple[int, ...] | None, dtype: str) -> str | None:
        """Why no flavour can hold this tensor, whatever the limits; or None."""
        if shape is None:
            return "shape is not static"
        if not is_packed_texel_shape(shape):
            return f"shape {list(shape)} is not 5-D packed with inner axis 4"
        if dtype not in self.preset.texel_dtypes:
            return f"dtype {dtype} is not a texel type"
        return None

    def _within_limits(self, shape: tuple[int, ...], flavour: str) -> TextureFit:
        layers, height, width = image_extent(shape, flavour)
        if layers <= self.depth_limit and height <= self.spatial_limit \
                and width <= self.spatial_limit:
            return TextureFit(flavour, f"fits {flavour} as {layers} x {height} x {width} texels")
        return TextureFit(None, f"{flavour} of {layers} x {height} x {width} texels exceeds the "
                          f"limits (spatial {self.spatial_limit}, depth {self.depth_limit})")

    def fit(self, shape: tuple[int, ...] | None, dtype: str, weight: bool = False) -> TextureFit:
        """Decide whether a tensor of this shape and dtype can be a texture:
        the first of the preset's flavours it fits (of its ``map_flavours``
        for a feature map: of one batch, not a ``weight``)."""
        if (why := self._not_texel_data(shape, dtype)) is not None:
            return TextureFit(None, why)
        is_map = not weight and shape[0] == 1 and self.preset.map_flavours is not None
        for flavour in self.preset.map_flavours if is_map else self.preset.flavours:
            found = self._within_limits(shape, flavour)
            if found.scope is not None:
                return found
        return TextureFit(
            None,
            f"shape {list(shape)} exceeds the texture limits "
            f"(spatial {self.spatial_limit}, depth {self.depth_limit})",
        )

    def fit_as(self, shape: tuple[int, ...] | None, dtype: str, flavour: str) -> TextureFit:
        """Whether a tensor of this shape and dtype fits a texture of one
        given flavour (``check_invariants`` asks it of an annotated scope)."""
        if (why := self._not_texel_data(shape, dtype)) is not None:
            return TextureFit(None, why)
        if flavour not in FLAVOUR_AXES:
            return TextureFit(None, f"unknown texture flavour {flavour}")
        return self._within_limits(shape, flavour)


# Targets by short name. TVM's OpenCL target kind defaults its texture limits to
# Adreno's, so a non-Adreno OpenCL target must state its limits explicitly.
TARGET_PRESETS: dict[str, str | dict] = {
    "adreno-opencl": "qcom/adreno-opencl-texture",
    "adreno-vulkan": "qcom/adreno-vulkan-texture",
    "mali-opencl": {
        "kind": "opencl",
        "device": "mali",
        "keys": ["mali", "opencl", "gpu", "texture"],
        "texture_spatial_limit": MALI.spatial_limit,
        "texture_depth_limit": MALI.depth_limit,
    },
    # The Adreno target's keys and schedules, NVIDIA's limits and map flavours.
    "nvidia-opencl": {
        "kind": "opencl",
        "device": "nvidia",
        "keys": ["adreno", "opencl", "gpu", "texture"],
        "texture_spatial_limit": NVIDIA.spatial_limit,
        "texture_depth_limit": NVIDIA.depth_limit,
        "max_threads_per_block": 256,
        "max_num_threads": 256,
        "image_base_address_alignment": 64,
    },
}


# The host side of a GPU build only checks each kernel's arguments and
# launches it; LLVM's optimizer buys nothing measurable there and cost
# iris_landmark's build 0.45 s of 2.4 (0.03 s at opt-level 0: see
# bench/build_speed.py).  A host the caller names is used as given.
DEFAULT_HOST: dict = {"kind": "llvm", "opt-level": 0}


def host_target(host: tvm.target.Target | str | dict | None, target: tvm.target.Target
                ) -> tvm.target.Target:
    """The host target of a build for ``target``: ``host`` when given, else
    the host ``target`` carries, else :data:`DEFAULT_HOST`."""
    if host is not None:
        return make_target(host)
    return target.host or tvm.target.Target(DEFAULT_HOST)


def make_target(spec: tvm.target.Target | str | dict) -> tvm.target.Target:
    """A TVM target from a preset name, a tag, a JSON string or dict, or a Target."""
    if isinstance(spec, tvm.target.Target):
        return spec
    spec = TARGET_PRESETS.get(spec, spec) if isinstance(spec, str) else spec
    try:
        return tvm.target.Target(spec)
    except ValueError as err:
        # What TVM raises for any spec it cannot make a target of (an unknown
        # kind or tag, bad JSON, an option of the wrong type); anything else is
        # a bug and propagates.  The cause stays chained for a traceback.
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise TexscopeError(
            f"unknown target {spec!r} ({first}); use a preset ({', '.join(TARGET_PRESETS)}), "
            "a TVM tag such as 'qcom/adreno-opencl-texture', or target JSON") from err


def preset_of(target: tvm.target.Target) -> TexturePreset:
    """The preset of a target's ``device`` (Adreno's when unknown), its
    limits as the preset's."""
    return PRESETS.get(str(target.attrs.get("device", "")), ADRENO)


def texture_target(target: tvm.target.Target | str | dict, profile=None) -> TextureTarget:
    """Resolve a target (see :func:`make_target`) into a :class:`TextureTarget`.

    Limits come from the target's ``texture_spatial_limit`` and
    ``texture_depth_limit`` attributes where present, else from the preset of
    its ``device`` (Adreno when unknown); texel types and flavours from that
    preset.  ``profile`` (a :class:`~texscope.knowledge.profile.CostProfile`, a
    profile file's path or its parsed JSON) prices the plan; by default the
    preset's own profile.

    Raises
    ------
    TexscopeError
        If the target is not an OpenCL or Vulkan GPU target with ``texture``
        among its keys.
    """
    target = make_target(target)
    kind = target.kind.name
    if kind not in TEXTURE_KINDS or "texture" not in target.keys:
        raise TexscopeError(
            f"target {target.export()['kind']} with keys {list(target.keys)} has no GPU "
            "texture support; use an OpenCL or Vulkan target with the 'texture' key, "
            "e.g. 'qcom/adreno-opencl-texture'"
        )
    target_attrs = target.attrs
    base = preset_of(target)
    preset = attrs.evolve(
        base,
        spatial_limit=int(target_attrs.get("texture_spatial_limit", base.spatial_limit)),
        depth_limit=int(target_attrs.get("texture_depth_limit", base.depth_limit)),
    )
    return TextureTarget(target=target, kind=kind, preset=preset,
                         profile=cost_profile.resolve(profile, preset.default_profile))


class VDeviceTable:
    """The VDevices of one module, one per memory scope, created on demand.

    RealizeVDevice compares VDevices by identity, so every type must use the
    very objects listed in the module's ``global_infos``; this table hands
    them out.
    """

    def __init__(self, texture: TextureTarget):
        self._target = texture.target
        self._by_scope: dict[str, relax.VDevice] = {}

    def __getitem__(self, scope: str) -> relax.VDevice:
        vdevice = self._by_scope.get(scope)
        if vdevice is None:
            vdevice = relax.VDevice(self._target, 0, scope)
            self._by_scope[scope] = vdevice
        return vdevice

    def listed(self) -> list[relax.VDevice]:
        return list(self._by_scope.values())
