"""Published mobile models for tests and benchmarks: MediaPipe's ``.tflite`` files.

MediaPipe 0.10.14's wheel ships the TFLite models of its solutions (face
detection and landmarks, hands, pose, iris, selfie segmentation) under
``mediapipe/modules/``.  :func:`mediapipe_models` downloads the wheel once
with ``pip download --no-deps`` (mediapipe itself is never installed),
extracts those files into a cache directory and returns them by name.

Fetch from the command line (prints each model's name and path)::

    python -m texscope.models.corpus
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from ..errors import TexscopeError

MEDIAPIPE_VERSION = "0.10.14"
CACHE_ENV = "TEXSCOPE_MODEL_CACHE"
_MODULES_PREFIX = "mediapipe/modules/"
# Written last, so a cache interrupted mid-extraction is extracted again.
_COMPLETE = ".complete"


def cache_dir() -> Path:
    """Where the models live: ``$TEXSCOPE_MODEL_CACHE``, else
    ``~/.cache/texscope/mediapipe-<version>``."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override)
    return Path.home() / ".cache" / "texscope" / f"mediapipe-{MEDIAPIPE_VERSION}"


def _model_name(member: str) -> str:
    # mediapipe/modules/face_detection/face_detection_short_range.tflite
    return Path(member).stem


def _download_wheel(directory: Path) -> Path:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               f"mediapipe=={MEDIAPIPE_VERSION}", "-d", str(directory)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wheels = sorted(directory.glob("mediapipe-*.whl"))
    if done.returncode != 0 or not wheels:
        last = (done.stderr.strip().splitlines() or ["no wheel downloaded"])[-1]
        raise TexscopeError(f"could not download mediapipe=={MEDIAPIPE_VERSION} "
                            f"({' '.join(command[2:])}): {last}")
    return wheels[0]


def _extract(wheel: Path, into: Path) -> None:
    into.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive:
        members = [m for m in archive.namelist()
                   if m.startswith(_MODULES_PREFIX) and m.endswith(".tflite")]
        names = [_model_name(m) for m in members]
        if len(set(names)) != len(names):
            raise TexscopeError(f"{wheel.name}: two models share a file name in {members}")
        for member, name in zip(members, names):
            (into / f"{name}.tflite").write_bytes(archive.read(member))
    (into / _COMPLETE).write_text(wheel.name + "\n")


def mediapipe_models() -> dict[str, Path]:
    """MediaPipe's ``.tflite`` models, downloaded and extracted on first use.

    Returns
    -------
    dict of str to Path
        Model name (the file name without ``.tflite``, e.g.
        ``"face_detection_short_range"``) to the file in :func:`cache_dir`,
        sorted by name.

    Raises
    ------
    TexscopeError
        Where the wheel cannot be downloaded.
    """
    directory = cache_dir()
    if not (directory / _COMPLETE).exists():
        with tempfile.TemporaryDirectory(prefix="texscope-wheel-") as download:
            _extract(_download_wheel(Path(download)), directory)
    return {path.stem: path for path in sorted(directory.glob("*.tflite"))}


def main() -> int:
    try:
        models = mediapipe_models()
    except TexscopeError as err:
        print(f"texscope.models.corpus: error: {err}", file=sys.stderr)
        return 2
    for name, path in models.items():
        print(f"{name:<40} {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
