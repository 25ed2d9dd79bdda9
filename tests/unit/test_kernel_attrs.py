"""runtime/kernel/: the attr layouts each bpf() command and perf event takes are the
kernel's (include/uapi/linux/bpf.h, perf_event.h), a tracepoint's perf_event_attr is
libbcc's, a missing tracefs event is an OSError, and the calls' one convention: a
value, None for an expected absence, OSError with the kernel's errno otherwise
(against real maps when root; the rest of the kernel path: tests/e2e)."""

from __future__ import annotations

import ctypes as ct
import errno
import os
import struct
from pathlib import Path

import pytest

from planrunner.runtime import attach
from planrunner.runtime.kernel import bpf, perf


def _offsets(cls: type[ct.Structure]) -> dict[str, int]:
    return {name: getattr(cls, name).offset for name, *_ in cls._fields_
            if not name.startswith("_")}


def test_map_create_attr_is_the_kernels_layout() -> None:
    assert _offsets(bpf.MapCreateAttr) == {
        "map_type": 0, "key_size": 4, "value_size": 8, "max_entries": 12, "map_flags": 16,
        "inner_map_fd": 20, "numa_node": 24, "map_name": 28, "map_ifindex": 44,
        "btf_fd": 48, "btf_key_type_id": 52, "btf_value_type_id": 56}


def test_prog_load_attr_is_the_kernels_layout() -> None:
    assert _offsets(bpf.ProgLoadAttr) == {
        "prog_type": 0, "insn_cnt": 4, "insns": 8, "license": 16, "log_level": 24,
        "log_size": 28, "log_buf": 32, "kern_version": 40, "prog_flags": 44,
        "prog_name": 48, "prog_ifindex": 64, "expected_attach_type": 68}


def test_elem_obj_info_and_btf_attrs_are_the_kernels_layout() -> None:
    assert _offsets(bpf.ElemAttr) == {"map_fd": 0, "key": 8, "value": 16, "flags": 24}
    assert _offsets(bpf.ObjAttr) == {"pathname": 0, "bpf_fd": 8, "file_flags": 12}
    assert _offsets(bpf.InfoByFdAttr) == {"bpf_fd": 0, "info_len": 4, "info": 8}
    assert _offsets(bpf.BtfLoadAttr) == {"btf": 0, "btf_log_buf": 8, "btf_size": 16,
                                         "btf_log_size": 20, "btf_log_level": 24}


def test_batch_attr_is_the_kernels_layout() -> None:
    assert _offsets(bpf.BatchAttr) == {"in_batch": 0, "out_batch": 8, "keys": 16,
                                       "values": 24, "count": 32, "map_fd": 36,
                                       "elem_flags": 40, "flags": 48}
    assert ct.sizeof(bpf.BatchAttr) == 56


def test_uprobe_multi_link_attr_is_the_kernels_layout() -> None:
    assert _offsets(bpf.UprobeMultiLinkAttr) == {
        "prog_fd": 0, "target_fd": 4, "attach_type": 8, "flags": 12, "path": 16,
        "offsets": 24, "ref_ctr_offsets": 32, "cookies": 40, "cnt": 48,
        "multi_flags": 52, "pid": 56}


def test_the_attr_of_a_tracepoint_is_libbccs() -> None:
    attr = perf.tracepoint_attr(1234)
    assert len(attr) == 128
    assert struct.unpack_from("<IIQQQQQI", attr, 0) == (2, 128, 1234, 1, 1 << 10, 0, 0, 1)
    assert attr[52:] == bytes(128 - 52)


def test_the_side_band_attr_asks_for_mapping_records_on_the_monotonic_clock() -> None:
    attr = perf.mapping_records_attr()
    assert len(attr) == perf.MAPPING_ATTR_SIZE == 112
    kind, size, config = struct.unpack_from("<IIQ", attr, 0)
    assert (kind, size, config) == (perf.PERF_TYPE_SOFTWARE, 112, perf.PERF_COUNT_SW_DUMMY)
    flags = struct.unpack_from("<Q", attr, 40)[0]
    assert flags == sum(1 << b for b in (0, 8, 9, 13, 18, 23, 24, 25))
    assert struct.unpack_from("<i", attr, 92)[0] == perf.CLOCK_MONOTONIC  # clockid


def test_a_missing_tracefs_event_is_an_oserror(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(attach, "DEFAULT_TRACEFS", str(tmp_path / "none"))
    monkeypatch.setattr(attach, "_tracefs", lambda: str(tmp_path))
    with pytest.raises(OSError) as caught:
        attach.tracepoint_id("nosuch", "event")
    assert caught.value.errno == errno.ENOENT
    (tmp_path / "events" / "cat" / "ev").mkdir(parents=True)
    (tmp_path / "events" / "cat" / "ev" / "id").write_text("417\n")
    assert attach.tracepoint_id("cat", "ev") == 417
    monkeypatch.setattr(attach, "_tracefs", lambda: None)  # not mounted anywhere
    with pytest.raises(OSError) as caught:
        attach.tracepoint_id("cat", "ev")
    assert caught.value.errno == errno.ENOENT


def test_a_refused_call_is_an_oserror_with_the_kernels_errno() -> None:
    with pytest.raises(OSError) as caught:
        bpf.obj_get("/nonexistent/planrunner-pin")
    assert caught.value.errno in (errno.ENOENT, errno.EPERM)  # EPERM: not root
    with pytest.raises(OSError) as caught:
        bpf.uprobe_multi_link(0, "/bin/true", (), (), None, retprobe=False, pid=None)
    assert caught.value.errno == errno.EINVAL  # no offset: refused before the kernel


@pytest.mark.skipif(os.geteuid() != 0, reason="bpf() needs root")
def test_a_real_map_round_trip_follows_the_convention() -> None:
    fd = bpf.map_create(1, 4, 8, 4, name="pr test-map!")  # a hash map
    try:
        assert bpf.map_info(fd).shape == (1, 4, 8, 4)
        key = struct.pack("I", 7)
        assert bpf.map_lookup_elem(fd, key, 8) is None  # absent: None, not an error
        assert bpf.map_get_next_key(fd, None, 4) is None  # empty
        bpf.map_update_elem(fd, key, struct.pack("Q", 99))
        assert bpf.map_lookup_elem(fd, key, 8) == struct.pack("Q", 99)
        assert bpf.map_get_next_key(fd, None, 4) == key
        bpf.map_delete_elem(fd, key)
        with pytest.raises(FileNotFoundError):  # deleting what is absent: ENOENT
            bpf.map_delete_elem(fd, key)
        with pytest.raises(OSError) as caught:  # a flag update_elem has not
            bpf.map_update_elem(fd, key, struct.pack("Q", 1), flags=1 << 8)
        assert caught.value.errno == errno.EINVAL
    finally:
        os.close(fd)
    with pytest.raises(OSError) as caught:
        bpf.map_create(1, 0, 8, 4)  # a hash map needs a key
    assert caught.value.errno == errno.EINVAL


@pytest.mark.skipif(os.geteuid() != 0, reason="bpf() needs root")
def test_a_refused_program_carries_the_verifiers_log() -> None:
    exit_only = bytes.fromhex("9500000000000000")  # exit with r0 unset: refused
    insns = ct.create_string_buffer(exit_only, len(exit_only))
    with pytest.raises(bpf.ProgLoadError) as caught:
        bpf.prog_load(ct.addressof(insns), len(exit_only), b"GPL", bpf.BPF_PROG_TYPE_KPROBE,
                      0, 0, "pr_refused")
    assert caught.value.errno == errno.EACCES and "R0 !read_ok" in caught.value.log
    with pytest.raises(bpf.ProgLoadError) as caught:
        bpf.prog_load(ct.addressof(insns), len(exit_only), b"GPL", bpf.BPF_PROG_TYPE_KPROBE,
                      0, 0, "pr_refused", log=False)
    assert caught.value.log == ""
