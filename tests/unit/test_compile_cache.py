"""runtime/compile_cache.py without root or bcc: the key, the relocations, the file
format, permissions, corruption (rebuilt with a warning) and --no-cache."""

from __future__ import annotations

import io
import os
import struct
from pathlib import Path
from typing import Any

import pytest

from planrunner.cli import build_parser
from planrunner.runtime import compile_cache as cc
from planrunner.runtime import entry_store
from planrunner.runtime.bcc_backend import BccBackend
from planrunner.runtime.features import KernelFeatures

INSN = struct.Struct("<BBhi")


def ld_map(fd: int, dst: int = 1) -> bytes:
    """ld_imm64 rDST = map fd (two slots)."""
    return INSN.pack(0x18, (cc.BPF_PSEUDO_MAP_FD << 4) | dst, 0, fd) + INSN.pack(0, 0, 0, 0)


EXIT = INSN.pack(0xB7, 0, 0, 0) + INSN.pack(0x95, 0, 0, 0)  # r0 = 0; exit


def program() -> cc.CompiledProgram:
    insns = ld_map(7) + ld_map(4, 2) + INSN.pack(0x18, 0, 0, 99) + INSN.pack(0, 0, 0, 1) + EXIT
    clean, relocs = cc.find_relocs(insns, {4: 0, 7: 1})
    maps = (cc.MapDef("pr_config", 2, 4, 4, 2, 0, '"int"', '"unsigned int"'),
            cc.MapDef("pr_events", 27, 0, 0, 1 << 20, 0, '"int"', '"int"'))
    return cc.CompiledProgram("GPL", 393664, maps, (cc.FuncDef("pr_tick_s0", clean, relocs),))


def cache(tmp_path: Path) -> tuple[cc.ProgramCache, io.StringIO]:
    err = io.StringIO()
    return cc.ProgramCache(tmp_path / "c" / "programs", err), err


# --- the key ----------------------------------------------------------------------------

def test_the_key_changes_with_every_input_and_only_then() -> None:
    base: dict[str, Any] = dict(c_source="int x;", cflags=["-DA=1"], kernel="6.18|#1",
                                bcc="bcc:0.26", version="0.1.0")
    key = cc.cache_key(**base)
    assert key == cc.cache_key(**base)
    for field, other in [("c_source", "int y;"), ("cflags", ["-DA=2"]),
                         ("kernel", "6.19|#1"), ("kernel", "6.18|#2"), ("bcc", "bcc:0.27"),
                         ("version", "0.2.0")]:
        assert cc.cache_key(**{**base, field: other}) != key, field
    # parts are length-prefixed: moving text from one part to the next is another key
    assert cc.cache_key(**{**base, "cflags": ["-DA=1", "x"]}) != \
        cc.cache_key(**{**base, "cflags": ["-DA=1x"]})


def test_the_default_key_reads_the_kernel_and_bcc_without_importing_bcc() -> None:
    import sys
    had = "bcc" in sys.modules
    key = cc.cache_key("int x;", [])
    assert len(key) == 64 and key == cc.cache_key("int x;", [])
    assert os.uname().release in cc.kernel_identity()
    assert cc.bcc_identity().startswith("bcc:")
    assert ("bcc" in sys.modules) == had


# --- relocations --------------------------------------------------------------------------

def test_map_fds_are_recorded_zeroed_and_patched_back() -> None:
    prog = program()
    func = prog.funcs[0]
    assert func.relocs == ((0, 1), (2, 0))
    assert INSN.unpack_from(func.insns, 0)[3] == 0 and INSN.unpack_from(func.insns, 16)[3] == 0
    out = cc.relocate(func, [30, 31])
    assert INSN.unpack_from(out, 0)[3] == 31 and INSN.unpack_from(out, 16)[3] == 30
    assert INSN.unpack_from(out, 32)[3] == 99  # a plain 64-bit constant is left alone
    assert out[48:] == EXIT


def test_unknown_fds_and_other_relocations_are_not_cached() -> None:
    with pytest.raises(cc.Uncacheable, match="not one of the maps"):
        cc.find_relocs(ld_map(9), {4: 0})
    map_value = INSN.pack(0x18, 2 << 4, 0, 4) + INSN.pack(0, 0, 0, 0)  # BPF_PSEUDO_MAP_VALUE
    with pytest.raises(cc.Uncacheable, match="kind 2"):
        cc.find_relocs(map_value, {4: 0})
    with pytest.raises(cc.Uncacheable):
        cc.find_relocs(b"\0" * 12, {})


# --- storing and reading ------------------------------------------------------------------

def test_round_trip_with_private_permissions(tmp_path: Path) -> None:
    c, err = cache(tmp_path)
    old = os.umask(0)  # a permissive umask must not widen anything
    try:
        c.put("k1", program())
    finally:
        os.umask(old)
    assert c.get("k1") == program()
    assert err.getvalue() == ""
    assert (Path(c.dir).stat().st_mode & 0o777) == 0o700
    assert (Path(c.dir).parent.stat().st_mode & 0o777) == 0o700
    assert (Path(c.path("k1")).stat().st_mode & 0o777) == 0o600
    assert [p.name for p in Path(c.dir).iterdir()] == ["k1.bpf"]  # no temporary left


def test_a_miss_is_none_and_the_log_says_so(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(entry_store.LOG_ENV, "1")
    c, err = cache(tmp_path)
    assert c.get("nope") is None
    c.put("k1", program())
    assert c.get("k1") is not None
    log = err.getvalue()
    assert "cache: miss" in log and "cache: stored" in log and "cache: hit" in log


def test_an_entry_under_another_key_is_not_loaded(tmp_path: Path) -> None:
    c, err = cache(tmp_path)
    c.put("k1", program())
    os.rename(c.path("k1"), c.path("k2"))
    assert c.get("k2") is None
    assert "corrupt" in err.getvalue() and "another key" in err.getvalue()


@pytest.mark.parametrize("damage", ["truncate", "truncate-header", "flip-body", "flip-magic",
                                    "flip-digest", "version", "empty", "json"])
def test_corrupt_entries_are_reported_removed_and_rebuilt(tmp_path: Path, damage: str) -> None:
    c, err = cache(tmp_path)
    c.put("k1", program())
    path = Path(c.path("k1"))
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[:-5]
    elif damage == "truncate-header":
        data = data[:20]
    elif damage == "flip-body":
        data[-10] ^= 0x01
    elif damage == "flip-magic":
        data[0] ^= 0x01
    elif damage == "flip-digest":
        data[20] ^= 0x80
    elif damage == "version":
        data[8:12] = struct.pack("<I", cc.FORMAT_VERSION + 1)
    elif damage == "empty":
        data = bytearray()
    elif damage == "json":  # a valid checksum over a body that is not ours
        import hashlib
        body = b'{"key": "k1", "maps": 3}'
        data = bytearray(struct.pack("<8sI32s", cc.MAGIC, cc.FORMAT_VERSION,
                                     hashlib.sha256(body).digest()) + body)
    path.write_bytes(bytes(data))
    assert c.get("k1") is None
    assert "warning: compiled-program cache entry" in err.getvalue()
    assert "corrupt" in err.getvalue()
    assert not path.exists()
    c.put("k1", program())  # what the compile does next
    assert c.get("k1") == program()


def test_a_directory_open_to_others_is_not_used(tmp_path: Path) -> None:
    c, err = cache(tmp_path)
    c.put("k1", program())
    Path(c.dir).chmod(0o755)
    assert c.get("k1") is None
    assert "not using the program cache" in err.getvalue()
    c.put("k2", program())
    assert not Path(c.path("k2")).exists()


def test_a_file_open_to_others_is_ignored(tmp_path: Path) -> None:
    c, err = cache(tmp_path)
    c.put("k1", program())
    Path(c.path("k1")).chmod(0o644)
    assert c.get("k1") is None
    assert "not a private file" in err.getvalue()


def test_a_symlinked_entry_is_not_followed(tmp_path: Path) -> None:
    c, err = cache(tmp_path)
    c.put("k1", program())
    os.rename(c.path("k1"), tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", c.path("k1"))
    assert c.get("k1") is None
    assert "cannot read" in err.getvalue()


def test_old_entries_are_pruned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(entry_store, "MAX_ENTRIES", 2)
    c, _err = cache(tmp_path)
    for i, key in enumerate(("a", "b", "c")):
        c.put(key, program())
        os.utime(c.path(key), ns=(i * 10**9, i * 10**9))
    c.put("d", program())
    assert sorted(p.name for p in Path(c.dir).iterdir()) == ["c.bpf", "d.bpf"]


def test_where_the_cache_lives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(entry_store.DIR_ENV, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", "/home/someone-else")  # sudo may keep it: not used
    import pwd
    home = Path(pwd.getpwuid(os.geteuid()).pw_dir)
    assert Path(entry_store.default_dir()) == home / ".cache" / "planrunner" / "programs"
    monkeypatch.setattr(entry_store, "_home", lambda: tmp_path)
    assert Path(entry_store.default_dir()) == tmp_path / ".cache" / "planrunner" / "programs"
    (tmp_path / "xdg").mkdir()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert Path(entry_store.default_dir()) == tmp_path / "xdg" / "planrunner" / "programs"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")  # the spec says: ignore it
    assert Path(entry_store.default_dir()) == tmp_path / ".cache" / "planrunner" / "programs"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    real_stat = os.stat

    def other_owner(path: object, *a: object, **k: object) -> os.stat_result:
        st = real_stat(path, *a, **k)  # type: ignore[arg-type]
        if str(path) == str(tmp_path / "xdg"):
            return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink,
                                   os.geteuid() + 1, *st[5:10]))
        return st

    monkeypatch.setattr(os, "stat", other_owner)
    assert Path(entry_store.default_dir()) == tmp_path / ".cache" / "planrunner" / "programs"
    monkeypatch.setattr(os, "stat", real_stat)
    monkeypatch.setenv(entry_store.DIR_ENV, str(tmp_path / "mine"))
    assert Path(entry_store.default_dir()) == tmp_path / "mine"


# --- --no-cache -------------------------------------------------------------------------------

def test_no_cache_flag_turns_the_cache_off() -> None:
    parser = build_parser()
    assert parser.parse_args(["run", "p.yaml"]).no_cache is False
    assert parser.parse_args(["run", "p.yaml", "--no-cache"]).no_cache is True
    assert cc.open_cache(io.StringIO(), enabled=False) is None
    assert isinstance(cc.open_cache(io.StringIO()), cc.ProgramCache)


def test_a_backend_without_a_cache_never_looks(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_a: object, **_k: object) -> str:
        raise AssertionError("keyed without a cache")

    monkeypatch.setattr(cc, "cache_key", boom)
    backend = BccBackend(KernelFeatures(True, True, True, True), cache=None)
    from planrunner.render.model import RenderedProgram
    assert backend._cached(RenderedProgram("", (), (), (), "plan"), []) == (None, None)


def test_the_key_distinguishes_functions_loaded_sleepable() -> None:
    """The same C loaded with BPF_F_SLEEPABLE or without is another entry."""
    base: dict[str, Any] = dict(c_source="int x;", cflags=["-DPR_SLEEPABLE"], kernel="k",
                                bcc="b", version="v")
    plain = cc.cache_key(**base)
    one = cc.cache_key(**base, sleepable=["pr_probe_0"])
    assert len({plain, one, cc.cache_key(**base, sleepable=["pr_probe_1"])}) == 3
    assert cc.cache_key(**base, sleepable=["b", "a"]) == cc.cache_key(**base,
                                                                     sleepable=["a", "b"])


def test_a_pinned_map_round_trips_as_its_pin(tmp_path: Path) -> None:
    c, _err = cache(tmp_path)
    base = program()
    pinned = cc.MapDef("pr_tracers", 2, 4, 192, 1, 0, '"int"', '"x"',
                       "/sys/fs/bpf/planrunner_tracers")
    prog = cc.CompiledProgram(base.license, base.kern_version, (*base.maps, pinned),
                              base.funcs)
    c.put("k" * 64, prog)
    got = c.get("k" * 64)
    assert got == prog and got.maps[2].pin == "/sys/fs/bpf/planrunner_tracers"
    assert got.maps[0].pin == ""


def test_storage_btf_is_an_int_key_and_a_value_of_the_maps_size() -> None:
    blob = cc.storage_btf(40)
    magic, version, _flags, hdr, type_off, type_len, str_off, str_len = \
        struct.unpack_from("<HBBIIIII", blob)
    assert (magic, version, hdr, type_off) == (0xEB9F, 1, 24, 0)
    assert len(blob) == hdr + type_len + str_len and str_off == type_len
    strings = blob[hdr + str_off:]
    types = blob[hdr:hdr + type_len]
    name_off, info, size = struct.unpack_from("<III", types, 0)
    assert strings[name_off:].split(b"\0")[0] == b"int" and info >> 24 == 1 and size == 4
    # [3], the value: an array of 40 of [2] (char) indexed by [1]
    name_off, info, _zero = struct.unpack_from("<III", types, 32)
    assert info >> 24 == 3 and struct.unpack_from("<III", types, 44) == (2, 1, 40)


class _ModLib:
    """libbcc's module introspection over two maps and one function."""

    def __init__(self, types: dict[int, int]) -> None:
        self.types = types  # fd -> map type

    def bpf_num_tables(self, _mod: object) -> int:
        return len(self.types)

    def bpf_table_name(self, _mod: object, i: int) -> bytes:
        return f"m{i}".encode()

    def bpf_table_fd_id(self, _mod: object, i: int) -> int:
        return list(self.types)[i]

    def bpf_table_key_desc_id(self, _mod: object, _i: int) -> bytes:
        return b'"int"'

    bpf_table_leaf_desc_id = bpf_table_key_desc_id

    def bpf_num_functions(self, _mod: object) -> int:
        return 0

    def bpf_module_license(self, _mod: object) -> bytes:
        return b"GPL"

    def bpf_module_kern_version(self, _mod: object) -> int:
        return 0


@pytest.mark.parametrize(("mtype", "stored"), [(1, True), (7, True), (29, True),
                                                (12, False), (25, False), (8, True)])
def test_only_maps_the_cached_path_can_create_and_read_are_stored(
        monkeypatch: pytest.MonkeyPatch, mtype: int, stored: bool) -> None:
    """Hash, stack trace, task storage (created with storage_btf): stored; map-in-map
    or another kind the cached path cannot create or read back: not stored at all."""
    from planrunner.runtime import bcc_backend

    types = {10: 2, 11: mtype}
    monkeypatch.setattr(bcc_backend, "_module_lib", lambda: _ModLib(types))
    monkeypatch.setattr(cc, "map_info", lambda fd: (types[fd], 4, 8, 16, 0))

    class Bpf:
        module = object()

    if stored:
        prog = bcc_backend._capture(Bpf(), {})
        assert [m.map_type for m in prog.maps] == [2, mtype]
    else:
        with pytest.raises(cc.Uncacheable, match=f"type {mtype}"):
            bcc_backend._capture(Bpf(), {})


def test_a_map_named_as_pinned_that_is_not_the_pinned_one_is_not_stored(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from planrunner.runtime import bcc_backend

    types = {10: 2}
    monkeypatch.setattr(bcc_backend, "_module_lib", lambda: _ModLib(types))
    monkeypatch.setattr(cc, "map_info", lambda fd: (types[fd], 4, 8, 16, 0))
    monkeypatch.setattr(cc, "same_map", lambda fd, pin: False)

    class Bpf:
        module = object()

    with pytest.raises(cc.Uncacheable, match="not the one pinned"):
        bcc_backend._capture(Bpf(), {"m0": "/sys/fs/bpf/x"})
    monkeypatch.setattr(cc, "same_map", lambda fd, pin: True)
    assert bcc_backend._capture(Bpf(), {"m0": "/sys/fs/bpf/x"}).maps[0].pin == "/sys/fs/bpf/x"


def test_optional_btf_constants_are_keyed_by_their_file_without_parsing_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A warm run keys the BTF constants (the comm's offset, RenderedProgram.btf_constants,
    and the own fork and exec programs') by the BTF file they come from, one stat: no
    parse (~75 ms) before the cache is looked up. Another file, or none, is another key."""
    from planrunner.elf import btf

    def no_parse(*_a: object) -> btf.Btf:
        raise AssertionError("the key parsed the BTF")

    monkeypatch.setattr(btf, "load", no_parse)
    blob = tmp_path / "btf"
    blob.write_bytes(b"one")
    monkeypatch.setenv("PLANRUNNER_VMLINUX_BTF", str(blob))
    first = btf.identity()
    assert first == btf.identity()
    blob.write_bytes(b"other")
    assert btf.identity() != first
    monkeypatch.setenv("PLANRUNNER_VMLINUX_BTF", str(tmp_path / "none"))
    assert btf.identity() != first


def test_the_kernel_offsets_a_program_needs_are_keyed_without_parsing_the_btf(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """RenderedProgram.runtime_constants are defined where the program compiles: its
    flags and cache key parse no BTF (~20 ms a warm run of a stack plan spent), and
    the key names which members they are."""
    import io
    from dataclasses import replace

    from planrunner.elf import btf
    from planrunner.elf.btf import KernelMember
    from planrunner.render.model import RenderedProgram, RuntimeConstant
    from planrunner.runtime import bcc_backend
    from planrunner.runtime.features import KernelFeatures

    def no_parse(*_a: object) -> btf.Btf:
        raise AssertionError("the flags or the key parsed the BTF")

    monkeypatch.setattr(btf, "load", no_parse)
    monkeypatch.setenv("PLANRUNNER_VMLINUX_BTF", str(tmp_path / "btf"))
    (tmp_path / "btf").write_bytes(b"one")
    mm = RuntimeConstant("PR_TASK_MM_OFFSET", KernelMember("task_struct", "mm"))
    program = RenderedProgram("int f(void *c) { return 0; }", (), (), (), "plan",
                              runtime_constants=(mm,))
    assert not any(f.startswith("-DPR_TASK_MM_OFFSET")
                   for f in bcc_backend.compile_flags(program, "/sys/fs/bpf/x", False))
    backend = bcc_backend.BccBackend(KernelFeatures(True, True, True, sleepable=False),
                                     cache=cc.ProgramCache(tmp_path / "c", io.StringIO()))
    key, _ = backend._cached(program, [])
    other = replace(program, runtime_constants=(
        RuntimeConstant("PR_TASK_MM_OFFSET", KernelMember("task_struct", "active_mm")),))
    assert backend._cached(other, [])[0] != key
