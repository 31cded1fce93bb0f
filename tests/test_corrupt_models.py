"""Corrupt model files of every format (.tflite, .onnx, TVMScript .py): one
line, exit status 2, nothing written, for build, run and explain (issue 49).

The property test cuts and flips bytes of a real .tflite (MediaPipe's
hand_recrop) and a small .onnx at random offsets: a few examples in the
default run, the profile's count with ``--hypothesis-profile long``.
"""

import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from test_cli import conv_relu_onnx
from texscope.cli import main
from texscope.errors import TexscopeError
from texscope.frontend.model_file import load_model

SMALL_PY = Path(__file__).parent / "modules" / "adreno_small.py"
# The default run's examples per format; the long profile's own count otherwise.
EXAMPLES = 6 if settings.get_current_profile_name() == "ci" else settings().max_examples


@pytest.fixture(scope="module")
def originals(tmp_path_factory):
    """The clean bytes of one model file of each format."""
    from texscope.models.corpus import mediapipe_models

    onnx_file = tmp_path_factory.mktemp("onnx") / "conv_relu.onnx"
    conv_relu_onnx(onnx_file)
    return {".tflite": mediapipe_models()["hand_recrop"].read_bytes(),
            ".onnx": onnx_file.read_bytes(), ".py": SMALL_PY.read_bytes()}


@st.composite
def damage(draw, size: int):
    """A cut (the file up to an offset) or a few flipped bits, as a function
    of the bytes."""
    if draw(st.booleans()):
        cut = draw(st.integers(0, size - 1))
        return f"cut at {cut}", lambda data: data[:cut]
    flips = draw(st.lists(st.tuples(st.integers(0, size - 1), st.integers(0, 7)),
                          min_size=1, max_size=8))

    def flipped(data):
        changed = bytearray(data)
        for offset, bit in flips:
            changed[offset] ^= 1 << bit
        return bytes(changed)

    return f"{len(flips)} bits flipped", flipped


def one_line_and_nothing_written(model: Path, out: Path, capsys) -> None:
    for command in (["build", str(model), "-o", str(out)], ["run", str(model)],
                    ["explain", str(model)]):
        assert main(command) == 2, command
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("texscope: error: "), err
        assert str(model) in err, err
    assert not out.exists()


@pytest.mark.fuzz
@pytest.mark.parametrize("suffix", [".tflite", ".onnx", ".py"])
# capsys is read (and so emptied) after every command.
@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_damaged_model_file_is_one_line_or_still_a_model(originals, suffix, data, capsys):
    clean = originals[suffix]
    what, damaged = data.draw(damage(len(clean)), label="damage")
    with tempfile.TemporaryDirectory() as directory:
        model = Path(directory) / f"damaged{suffix}"
        model.write_bytes(damaged(clean))
        check_damaged(model, Path(directory) / "out", suffix, what, capsys)


def check_damaged(model: Path, out: Path, suffix: str, what: str, capsys) -> None:
    try:
        load_model(str(model), "ConvFma" if suffix == ".py" else None)
    except TexscopeError as err:
        assert "\n" not in str(err), str(err)
        event(f"{suffix}: refused")
    else:
        # Flipped weights (or a comment) make another valid model: nothing to refuse.
        event(f"{suffix}: still a model ({what.split()[-1]})")
        return
    if suffix != ".py":  # a .py names its module; the commands are driven on the others
        one_line_and_nothing_written(model, out, capsys)


def texscope(*args):
    return subprocess.run(["texscope", *map(str, args)], capture_output=True, text=True)


def test_truncated_files_are_one_line_for_every_command(originals, tmp_path):
    """As a user meets them: a .tflite cut at 10 KB through every command, an
    .onnx cut in half through build, with the installed command."""
    cases = {"cut.tflite": (originals[".tflite"][:10_000], ("build", "run", "explain")),
             "half.onnx": (originals[".onnx"][:len(originals[".onnx"]) // 2], ("build",))}
    for name, (data, commands) in cases.items():
        model = tmp_path / name
        model.write_bytes(data)
        out = tmp_path / f"out-{name}"
        for command in commands:
            done = texscope(command, model, *(["-o", out] if command == "build" else []))
            assert done.returncode == 2, (command, done.stderr)
            (line,) = done.stderr.splitlines()
            assert line.startswith(f"texscope: error: {model}: not a readable "), line
        assert not out.exists()
