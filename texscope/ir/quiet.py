"""Dropping TVM's C++ log lines that mean nothing to a texscope user.

TVM's C++ side writes straight to the process's stderr: "BlockBuilder
destroyed with remaining blocks!" while a failed TVMScript parse is torn down
(the error itself is reported), "Scope Saving:global.texture-weight" for
every texture parameter an executable saves (the scopes are meant), and
"Unable to detect CUDA version" for a ``--target cuda`` texscope refuses.  Those
lines are dropped; everything else written there is passed on.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import tempfile

NOISE = ("BlockBuilder destroyed with remaining blocks", "Scope Saving:",
         # Making any CUDA target, before texscope can say it has no textures.
         "Unable to detect CUDA version")


@contextlib.contextmanager
def quiet_native_stderr(noise=NOISE):
    """Capture what native code writes to file descriptor 2 and pass on
    every line but those containing one of ``noise``."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            gc.collect()  # free half-built TVM objects while stderr is captured
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            kept = [line for line in captured.read().decode(errors="replace").splitlines(True)
                    if not any(n in line for n in noise)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()
