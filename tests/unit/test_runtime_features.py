"""runtime/features.py (detected once, env overrides), the attach strategy chosen from
it (runtime/attach.py), semaphore mode from it, a BccBackend that does nothing before
`load`, and one that compiles and loads sleepable programs only where both the kernel
and the program allow (bcc faked). No root needed: without it the bpf() probes simply
read False."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from planrunner.errors import BackendError, BackendUnavailable
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


class _FakeImage:
    """What BccBackend.load touches of a loaded image: each function's load."""

    loads: list[tuple[str, int, int | None, int]] = []

    def __init__(self, compiled: object) -> None:
        self.compiled = compiled

    def load_func(self, name: str, prog_type: int, attach_type: int | None = None,
                  prog_flags: int = 0) -> int:
        _FakeImage.loads.append((name, prog_type, attach_type, prog_flags))
        return 42

    def close(self) -> None:
        pass


def _sites(sleepable: bool) -> RenderedProgram:
    from planrunner.render.model import AttachSite, TargetFile

    site = AttachSite("uprobe", "pr_p_0", "p", 0, TargetFile("/bin/true", "true", None),
                      sleepable=sleepable)
    return RenderedProgram("", (site,), (), (), "plan")


@pytest.mark.parametrize(("kernel", "site", "defined"), [
    (True, True, True), (False, True, False), (True, False, False)])
def test_sleepable_programs_compile_and_load_only_where_both_allow(
        monkeypatch: pytest.MonkeyPatch, kernel: bool, site: bool, defined: bool) -> None:
    """Compiled with PR_SLEEPABLE and loaded BPF_F_SLEEPABLE (for a uprobe_multi link)
    only where the kernel and the site both allow it."""
    from planrunner.runtime import bcc_backend
    from planrunner.runtime import compile_cache as cc
    from planrunner.runtime.kernel.bpf import BPF_F_SLEEPABLE, BPF_PROG_TYPE_KPROBE

    cflags: list[list[str]] = []
    monkeypatch.setattr(bcc_backend, "check_machine", lambda: None)
    monkeypatch.setattr(bcc_backend, "compile_program",
                        lambda c, flags, pins, **constants: cflags.append(list(flags)) or "image")
    monkeypatch.setattr(cc, "LoadedProgram", _FakeImage)
    _FakeImage.loads = []
    backend = BccBackend(KernelFeatures(True, True, True, sleepable=kernel))
    backend.load(_sites(site))
    assert ("-DPR_SLEEPABLE" in cflags[0]) is defined
    flags = BPF_F_SLEEPABLE if defined else 0
    assert _FakeImage.loads == [("pr_p_0", BPF_PROG_TYPE_KPROBE, BPF_TRACE_UPROBE_MULTI,
                                 flags)]
    backend.loaded = None


class _RefusingImage(_FakeImage):
    """An image whose function the kernel refuses, with the verifier's last words."""

    def load_func(self, name: str, prog_type: int, attach_type: int | None = None,
                  prog_flags: int = 0) -> int:
        from planrunner.runtime import compile_cache as cc

        _FakeImage.loads.append((name, prog_type, attach_type, prog_flags))
        if self.compiled == "cached":
            raise cc.CacheLoadError("refused", 13, "Permission denied", ("old image",))
        if self.compiled == "fresh-bad":
            raise cc.CacheLoadError("refused", 13, "Permission denied",
                                    ("R1 invalid mem access 'scalar'",))
        return 42


@pytest.mark.parametrize("fresh", ["fresh-good", "fresh-bad"])
def test_a_refused_cached_image_is_compiled_again_and_a_refused_fresh_one_says_why(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fresh: str) -> None:
    """One load path: a cached image the kernel refuses is dropped and compiled again;
    a freshly compiled one it refuses is an error naming the probe, with the verifier's
    words (nothing is compiled a second time)."""
    import io

    from planrunner.runtime import bcc_backend
    from planrunner.runtime import compile_cache as cc

    compiles: list[str] = []
    cache = cc.ProgramCache(tmp_path, io.StringIO())
    monkeypatch.setattr(bcc_backend, "check_machine", lambda: None)
    monkeypatch.setattr(cache, "get", lambda key: "cached")
    monkeypatch.setattr(cache, "put", lambda key, image: compiles.append(f"put {image}"))
    monkeypatch.setattr(cache, "discard", lambda key, why: compiles.append(f"drop {why}"))
    monkeypatch.setattr(bcc_backend, "compile_program",
                        lambda c, flags, pins, **constants: compiles.append("compile") or fresh)
    monkeypatch.setattr(cc, "LoadedProgram", _RefusingImage)
    _FakeImage.loads = []
    backend = BccBackend(KernelFeatures(True, True, True, sleepable=False), cache=cache)
    if fresh == "fresh-good":
        backend.load(_sites(False))
        assert compiles == ["drop was refused (could not load probe 'p': Permission "
                            "denied)", "compile", "put fresh-good"]
        assert backend.loaded is not None and not backend.from_cache
        backend.loaded = None
        return
    with pytest.raises(BackendError) as refused:
        backend.load(_sites(False))
    said = refused.value.diagnostics[0]
    assert said.message == "could not load probe 'p': Permission denied"
    assert said.hints == ("the verifier said: R1 invalid mem access 'scalar'",)
    assert compiles[1:] == ["compile"]  # once, and nothing stored
    assert backend.loaded is None


class _SlowRefusals(_FakeImage):
    """pr_b's refusal comes late, pr_c's at once; pr_a loads."""

    def load_func(self, name: str, prog_type: int, attach_type: int | None = None,
                  prog_flags: int = 0) -> int:
        import time

        from planrunner.runtime import compile_cache as cc

        _FakeImage.loads.append((name, prog_type, attach_type, prog_flags))
        if name == "pr_b":
            time.sleep(0.2)
        if name in ("pr_b", "pr_c"):
            raise cc.CacheLoadError("refused", 13, f"refused {name}", ())
        return 42


def test_functions_load_side_by_side_once_each_and_the_first_refusal_in_order_is_said(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every function is loaded once (two sites of one function: once), all of them
    even after a refusal, and the error is the first site's in the program's order,
    not the first refusal in time."""
    from planrunner.render.model import AttachSite, TargetFile
    from planrunner.runtime import bcc_backend
    from planrunner.runtime import compile_cache as cc

    monkeypatch.setattr(bcc_backend, "check_machine", lambda: None)
    monkeypatch.setattr(bcc_backend, "compile_program", lambda c, flags, pins, **constants: "x")
    monkeypatch.setattr(cc, "LoadedProgram", _SlowRefusals)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    _FakeImage.loads = []
    binary = TargetFile("/bin/true", "true", None)
    sites = tuple(AttachSite("uprobe", fn, probe, 0, binary)
                  for fn, probe in (("pr_a", "a"), ("pr_b", "b"), ("pr_c", "c"),
                                    ("pr_a", "a2")))
    backend = BccBackend(KernelFeatures(True, True, True, sleepable=False))
    with pytest.raises(BackendError) as refused:
        backend.load(RenderedProgram("", sites, (), (), "plan"))
    assert refused.value.diagnostics[0].message == "could not load probe 'b': refused pr_b"
    assert sorted(name for name, *_ in _FakeImage.loads) == ["pr_a", "pr_b", "pr_c"]
    assert backend.loaded is None  # nothing kept
