"""The MediaPipe corpus: fetched once, extracted by name, never fetched again."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from texscope.models import corpus
from texscope.errors import TexscopeError

MEDIAPIPE_FILES = {
    "face_detection_full_range_sparse", "face_detection_short_range", "face_landmark",
    "face_landmark_with_attention", "hand_landmark_full", "hand_landmark_lite", "hand_recrop",
    "iris_landmark", "palm_detection_full", "palm_detection_lite", "pose_detection",
    "pose_landmark_full", "selfie_segmentation", "selfie_segmentation_landscape",
}


def test_the_wheel_ships_14_tflite_models(mediapipe):
    assert set(mediapipe) == MEDIAPIPE_FILES
    for name, path in mediapipe.items():
        assert path.name == f"{name}.tflite"
        # TFLite flatbuffers carry their identifier at bytes 4..8.
        assert path.read_bytes()[4:8] == b"TFL3"


def test_a_complete_cache_is_used_without_downloading(tmp_path, monkeypatch):
    monkeypatch.setenv(corpus.CACHE_ENV, str(tmp_path))
    (tmp_path / "a.tflite").write_bytes(b"x")
    (tmp_path / ".complete").write_text("wheel\n")

    def no_download(*_args, **_kwargs):
        raise AssertionError("downloaded although the cache is complete")

    monkeypatch.setattr(subprocess, "run", no_download)
    assert corpus.mediapipe_models() == {"a": tmp_path / "a.tflite"}


def _fake_wheel(directory, members):
    wheel = directory / f"mediapipe-{corpus.MEDIAPIPE_VERSION}-cp311-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for member in members:
            archive.writestr(member, member)
    return wheel


def test_an_interrupted_cache_is_extracted_again_from_pip_download(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv(corpus.CACHE_ENV, str(cache))
    cache.mkdir()
    (cache / "stale.tflite").write_bytes(b"half")  # no .complete marker
    calls = []

    def pip(command, **_kwargs):
        calls.append(command)
        _fake_wheel(Path(command[command.index("-d") + 1]), [
            "mediapipe/modules/face/face_model.tflite", "mediapipe/modules/hand/hand.tflite",
            "mediapipe/tasks/other.tflite", "mediapipe/modules/face/readme.txt"])
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(subprocess, "run", pip)
    models = corpus.mediapipe_models()
    (command,) = calls
    assert command[:4] == [sys.executable, "-m", "pip", "download"]
    assert "--no-deps" in command and f"mediapipe=={corpus.MEDIAPIPE_VERSION}" in command
    assert sorted(models) == ["face_model", "hand", "stale"]
    assert models["face_model"].read_bytes() == b"mediapipe/modules/face/face_model.tflite"
    assert corpus.mediapipe_models() == models and len(calls) == 1


def test_a_failed_download_is_a_texscope_error(tmp_path, monkeypatch):
    monkeypatch.setenv(corpus.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(subprocess, "run", lambda command, **_: subprocess.CompletedProcess(
        command, 1, "", "ERROR: No matching distribution found for mediapipe==0.10.14"))
    with pytest.raises(TexscopeError, match="could not download mediapipe==0.10.14.*No matching"):
        corpus.mediapipe_models()
    assert not (tmp_path / "cache" / ".complete").exists()


def test_the_default_cache_is_under_the_users_cache_directory(monkeypatch):
    monkeypatch.delenv(corpus.CACHE_ENV, raising=False)
    assert corpus.cache_dir().parts[-3:] == (".cache", "texscope", "mediapipe-0.10.14")
