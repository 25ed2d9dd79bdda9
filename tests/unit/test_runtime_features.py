"""runtime/features.py (detected once, env overrides), the attach strategy chosen from
it (runtime/attach.py), semaphore mode from it, a BccBackend that does nothing before
`load`, and one that compiles and loads sleepable programs only where both the kernel
and the program allow (bcc faked). No root needed: without it the bpf() probes simply
read False."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from planrunner.errors import BackendUnavailable
from planrunner.render.model import RenderedProgram
from planrunner.runtime import attach, features
from planrunner.runtime.bcc_backend import BccBackend
from planrunner.runtime.features import KernelFeatures
from planrunner.runtime.kernel.bpf import BPF_TRACE_UPROBE_MULTI
from planrunner.runtime.semaphores import semaphore_mode


@pytest.fixture
def fresh() -> Iterator[None]:
    features.detect.cache_clear()
    yield
    features.detect.cache_clear()


def test_detected_once(fresh: None) -> None:
    first = features.detect()
    assert features.detect() is first
    assert first.ref_ctr == os.path.exists(features.REF_CTR_FORMAT)


def test_perf_override_turns_links_off(fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(features.ATTACH_ENV, "perf")
    assert features.detect().uprobe_multi is False


def test_sleepable_override_forces_the_reread_fallback(
        fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(features, "_has_sleepable", lambda: True)
    assert features.detect().sleepable is True
    features.detect.cache_clear()
    monkeypatch.setenv(features.SLEEPABLE_ENV, "0")
    assert features.detect().sleepable is False


def test_uprobe_strategy_follows_the_features(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(attach, "_libbcc", lambda: object())  # no libbcc needed here
    links = attach.uprobe_strategy(KernelFeatures(True, True, True, True))
    perf = attach.uprobe_strategy(KernelFeatures(False, True, True, True))
    assert isinstance(links, attach.UprobeLinks) and isinstance(perf, attach.PerfUprobes)
    assert (links.attach_type, perf.attach_type) == (BPF_TRACE_UPROBE_MULTI, None)


def test_semaphore_mode_from_the_features(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PLANRUNNER_SEMAPHORE_MODE", raising=False)
    assert semaphore_mode(KernelFeatures(True, True, ref_ctr=True, sleepable=True)) \
        == "refctr"
    assert semaphore_mode(KernelFeatures(True, True, ref_ctr=False, sleepable=True)) \
        == "poke"
    monkeypatch.setenv("PLANRUNNER_SEMAPHORE_MODE", "poke")
    assert semaphore_mode(KernelFeatures(True, True, ref_ctr=True, sleepable=True)) \
        == "poke"


def test_bcc_backend_checks_the_machine_only_when_loading(
        monkeypatch: pytest.MonkeyPatch) -> None:
    backend = BccBackend(KernelFeatures(True, True, True, True))  # no root, no bcc needed
    backend.detach()
    backend.close()
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(BackendUnavailable, match="needs root"):
        backend.load(RenderedProgram("", (), (), (), "plan"))


class _FakeLib:
    def bpf_function_start(self, module: object, name: bytes) -> int:
        return 0x1000

    def bpf_function_size(self, module: object, name: bytes) -> int:
        return 64

    def bpf_module_license(self, module: object) -> bytes:
        return b"GPL"


class _FakeBcc:
    """What BccBackend.load and _load_func touch of bcc: compile flags and functions."""

    lib = _FakeLib()
    cflags: list[str] = []

    class BPF:
        KPROBE, TRACEPOINT = 2, 5

        def __init__(self, text: bytes, cflags: list[str]) -> None:
            _FakeBcc.cflags = cflags
            self.module = object()

        def load_func(self, name: bytes, prog_type: int, attach_type: int = -1) -> object:
            raise AssertionError("a sleepable program never goes through load_func")


def _sites(sleepable: bool) -> RenderedProgram:
    from planrunner.render.model import AttachSite, TargetFile

    site = AttachSite("uprobe", "pr_p_0", "p", 0, TargetFile("/bin/true", "true", None),
                      sleepable=sleepable)
    return RenderedProgram("", (site,), (), (), "plan")


@pytest.mark.parametrize(("kernel", "site", "defined"), [
    (True, True, True), (False, True, False), (True, False, False)])
def test_sleepable_programs_compile_and_load_only_where_both_allow(
        monkeypatch: pytest.MonkeyPatch, kernel: bool, site: bool, defined: bool) -> None:
    from planrunner.runtime import bcc_backend
    from planrunner.runtime.kernel.bpf import BPF_F_SLEEPABLE

    monkeypatch.setattr(bcc_backend, "check_machine", lambda: None)
    monkeypatch.setattr(bcc_backend, "import_bcc", lambda: _FakeBcc)
    loads: list[tuple[int, int, int]] = []

    def prog_load(insns: int, size: int, license_: bytes, prog_type: int, flags: int,
                  attach_type: int, name: str) -> int:
        loads.append((prog_type, flags, attach_type))
        return 42

    monkeypatch.setattr(bcc_backend, "prog_load", prog_load)
    backend = BccBackend(KernelFeatures(True, True, True, sleepable=kernel))
    program = _sites(site)
    backend.load(program)
    assert ("-DPR_SLEEPABLE" in _FakeBcc.cflags) is defined
    if defined:
        links = attach.UprobeLinks()
        assert backend._load_func(program.sites[0], links) == 42
        assert loads == [(_FakeBcc.BPF.KPROBE, BPF_F_SLEEPABLE, BPF_TRACE_UPROBE_MULTI)]
        backend._sleepable.clear()  # not a real fd
    backend.bpf = None
