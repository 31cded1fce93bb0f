"""Process memory during a build (texscope.tvm_workarounds.heap): the C heap, the collector."""

import texscope
from texscope.tvm_workarounds import heap
from texscope.models import zoo


class _Libc:
    """Records mallopt calls; answers with ``answer`` (glibc: 1 on success)."""

    def __init__(self, answer=1):
        self.calls, self.answer = [], answer

    def mallopt(self, param, value):
        self.calls.append((param, value))
        return self.answer


def test_the_thresholds_are_glibcs_dynamic_ceilings():
    libc = _Libc()
    assert heap.keep_freed_memory(libc)
    assert libc.calls == [(-3, 32 * 2**20), (-1, 64 * 2**20)]


def test_a_refused_threshold_is_reported():
    assert not heap.keep_freed_memory(_Libc(answer=0))


def test_a_build_keeps_freed_memory_once(monkeypatch):
    libc = _Libc()
    monkeypatch.setattr(heap, "_glibc", lambda: libc)
    monkeypatch.setattr(heap, "_done", [])
    texscope.build(zoo.NETWORKS["inception"](), "adreno-opencl")
    texscope.build(zoo.NETWORKS["inception"](), "adreno-opencl")
    assert libc.calls == [(-3, 32 * 2**20), (-1, 64 * 2**20)]


def test_glibc_is_found_here():
    # The machines texscope is tested and measured on run glibc; finding it
    # is what makes the thresholds apply at all.
    assert heap._glibc() is not None


def test_the_collector_is_paused_during_a_build_and_restored_after(monkeypatch):
    import gc

    seen = []
    real = texscope.backend.build._build

    def spying(*args):
        seen.append(gc.isenabled())
        return real(*args)

    monkeypatch.setattr(texscope.backend.build, "_build", spying)
    gc.enable()
    texscope.build(zoo.NETWORKS["inception"](), "adreno-opencl")
    assert seen == [False] and gc.isenabled()
    gc.disable()
    try:
        texscope.build(zoo.NETWORKS["inception"](), "adreno-opencl")
        assert seen == [False, False] and not gc.isenabled()
    finally:
        gc.enable()
