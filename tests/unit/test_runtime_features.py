"""runtime/features.py (detected once, env override), the attach strategy chosen from
it (runtime/attach.py), semaphore mode from it, and a BccBackend that does nothing
before `load`. No root needed: without it the bpf() probes simply read False."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from planrunner.errors import BackendUnavailable
from planrunner.render.model import RenderedProgram
from planrunner.runtime import attach, features
from planrunner.runtime.bcc_backend import BccBackend
from planrunner.runtime.features import KernelFeatures
from planrunner.runtime.semaphores import semaphore_mode
from planrunner.runtime.uprobe_links import BPF_TRACE_UPROBE_MULTI


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
