"""runtime/decode.py: raw records packed exactly as the BPF program lays them out
(render/layout.py) decode to the record contract of records.py, in batches, for every
field kind and every string status; the generated decoder quotes keys safely."""

from __future__ import annotations

import ctypes
import os
import struct
from datetime import UTC, datetime

from planrunner.render.layout import STR_NULL, STR_OK, STR_TRUNCATED, LayoutField, RecordLayout
from planrunner.render.model import PrintOutput
from planrunner.runtime.decode import Decoder

FIELDS = (LayoutField("n", "int", "f0"), LayoutField("u", "uint", "f1"),
          LayoutField("ok", "bool", "f2"), LayoutField("s", "str", "f3", 9))


def output(fields=FIELDS, output_id=3, name="out", probe="pr") -> PrintOutput:
    return PrintOutput(name, probe, RecordLayout(output_id, f"pr_rec_{output_id}", fields), None)


def pack(out: PrintOutput, ts: int, *values: object, pid: int = 42, comm: bytes = b"wl") -> bytes:
    return struct.pack(out.layout.struct_format, ts, out.layout.output_id, pid, pid + 1,
                       comm, *values)


def test_every_kind_and_the_head() -> None:
    out = output()
    dec = Decoder([out])
    ts = 5_000_000_123_456
    raw = pack(out, ts, -7, 2**64 - 1, 1, 0, STR_OK, b"ev-alpha\0")
    (rec,) = dec.decode_batch([raw])
    wall = datetime.fromtimestamp((ts + dec.offset_ns) // 1000 / 1e6, UTC)
    assert rec == {"time": wall.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "ts_ns": ts, "pid": 42,
                   "tid": 43, "comm": "wl", "probe": "pr", "output": "out", "n": -7,
                   "u": 2**64 - 1, "ok": True, "s": "ev-alpha"}
    assert list(rec)[-4:] == ["n", "u", "ok", "s"]  # plan order after the head



def test_strings_sit_last_in_the_record_but_keys_keep_plan_order() -> None:
    """A string declared first is stored after the fixed-size fields (a short string then
    leaves the rest of its buffer unwritten), with what follows its NUL left as is."""
    fields = (LayoutField("s", "str", "f0", 9), LayoutField("n", "int", "f1"))
    out = output(fields)
    assert [f.key for f in out.layout.in_memory] == ["n", "s"]
    stale = b"ev\0lpha\0"  # an older, longer string still in the ring past the NUL
    raw = struct.pack(out.layout.struct_format, 1, 3, 42, 43, b"wl", -5, 0, STR_OK, stale)
    (rec,) = Decoder([out]).decode_batch([raw])
    assert (rec["s"], rec["n"]) == ("ev", -5)
    assert list(rec)[-2:] == ["s", "n"]

def test_a_string_read_again_from_user_space_is_marked_reread(monkeypatch) -> None:
    """Status < 0: the kernel could not read it; what /proc/PID/mem gives later is the
    value, listed in `reread`; what it cannot give is null and unmarked."""
    from planrunner.runtime import decode

    fields = (LayoutField("a", "str", "f0", 9), LayoutField("b", "str", "f1", 9),
              LayoutField("c", "str", "f2", 9))
    out = output(fields)
    memory = {0x1000: b"later"}
    monkeypatch.setattr(decode, "reread_user_string", lambda pid, ptr, size: memory.get(ptr))
    raw = struct.pack(out.layout.struct_format, 1, 3, 42, 43, b"wl",
                      0x1000, -14, b"\0" * 9, 0x2000, -14, b"\0" * 9, 0x3000, STR_OK, b"ok\0")
    dec = Decoder([out])
    (rec,) = dec.decode_batch([raw])
    assert (rec["a"], rec["b"], rec["c"]) == ("later", None, "ok")
    assert rec["reread"] == ["a"] and dec.unreadable == 1


def test_time_is_cached_per_second_but_exact_to_the_microsecond() -> None:
    out = output()
    dec = Decoder([out])
    base = 7_000_000_000_000 - dec.offset_ns % 1_000_000_000  # a whole wall-clock second
    raws = [pack(out, base + d, 0, 0, 0, 0, STR_OK, b"x\0") for d in
            (0, 999_999_999, 1_000_000_000, 1_000_001_999)]
    times = [r["time"] for r in dec.decode_batch(raws)]
    assert [t[19:] for t in times] == [".000000Z", ".999999Z", ".000000Z", ".000001Z"]
    assert times[0][:19] == times[1][:19] != times[2][:19] == times[3][:19]
    assert (datetime.fromisoformat(times[2][:19]) - datetime.fromisoformat(times[1][:19])
            ).total_seconds() == 1



def test_time_by_millisecond_prefix_matches_the_clock_for_every_record() -> None:
    # the decoder builds a millisecond's prefix once per run of records in it: records
    # within one, across ones, across seconds and back in time all read as datetime does
    out = output()
    dec = Decoder([out])
    base = 9_000_000_000_000 - dec.offset_ns % 1_000_000_000
    deltas = (0, 1_000, 999_999, 1_000_000, 1_000_999, 1_999_999, 2_000_000, 999_999_999,
              1_000_000_000, 1_000_000_001, 1_000_000_999, 1_000_123_456, 500, 3_999_999_001)
    raws = [pack(out, base + d, 0, 0, 0, 0, STR_OK, b"x\0") for d in deltas]
    want = [datetime.fromtimestamp((base + d + dec.offset_ns) // 1000 / 1e6, UTC)
            .strftime("%Y-%m-%dT%H:%M:%S.%fZ") for d in deltas]
    assert [r["time"] for r in dec.decode_batch(raws)] == want
    assert [dec.decode(raw)["time"] for raw in raws] == want  # type: ignore[index]

def test_string_statuses() -> None:
    out = output()
    dec = Decoder([out])
    null = pack(out, 1, 0, 0, 0, 0, STR_NULL, b"\0")
    cut = pack(out, 1, 0, 0, 0, 0, STR_TRUNCATED, b"abcdefgh\0")
    odd = pack(out, 1, 0, 0, 0, 0, STR_OK, b"\xff\xfe\0")
    recs = dec.decode_batch([null, cut, odd])
    assert recs[0]["s"] is None and "truncated" not in recs[0]
    assert recs[1]["s"] == "abcdefgh" and recs[1]["truncated"] == ["s"]
    assert recs[2]["s"] == "\\xff\\xfe"


def test_unreadable_string_is_read_again_from_the_live_process() -> None:
    out = output()
    dec = Decoder([out])
    buf = ctypes.create_string_buffer(b"from-user-space")
    addr = ctypes.addressof(buf)
    raw = pack(out, 1, 0, 0, 0, addr, -14, b"\0" * 9, pid=os.getpid())
    (rec,) = dec.decode_batch([raw])
    assert rec["s"] == "from-use"  # read again: at most size - 1 = 8 bytes
    assert rec["reread"] == ["s"]  # later than the probe fired: it may be a newer value
    gone = pack(out, 1, 0, 0, 0, 0, -14, b"\0" * 9)
    (lost,) = dec.decode_batch([gone])
    assert lost["s"] is None and "reread" not in lost
    assert dec.unreadable == 1
    ok = pack(out, 1, 0, 0, 0, addr, STR_OK, b"kernel\0\0\0", pid=os.getpid())
    assert "reread" not in dec.decode_batch([ok])[0]


def test_several_outputs_dispatch_by_id_and_skip_unknown_ones() -> None:
    a = output(output_id=0, name="a")
    b = output(fields=(LayoutField("x", "int", "f0"),), output_id=1, name="b")
    dec = Decoder([a, b])
    stray = struct.pack("<QIII4x16sq", 1, 9, 1, 1, b"", 5)
    recs = dec.decode_batch([pack(b, 1, 11), stray, pack(a, 1, 1, 2, 0, 0, STR_OK, b"s\0")])
    assert [(r["output"], r.get("x"), r.get("ok")) for r in recs] == [("b", 11, None),
                                                                      ("a", None, False)]


def test_keys_enter_the_generated_code_only_as_literals() -> None:
    evil = "x'] = 1; import os; os._exit(3) #"
    out = output(fields=(LayoutField(evil, "int", "f0"),), output_id=0)
    (rec,) = Decoder([out]).decode_batch([pack(out, 1, 99)])
    assert rec[evil] == 99


# -- variable records (render/layout.py RecordLayout.variable) --------------------------

LONG = (LayoutField("n", "int", "f0"), LayoutField("s", "str", "f1", 129))


def test_a_variable_layout_reserves_by_the_last_string_and_is_its_prefix_first() -> None:
    fixed = RecordLayout(0, "pr_rec_0", LONG)
    var = RecordLayout(0, "pr_rec_0", LONG, variable=True)
    assert fixed.sizes == (fixed.size,) and fixed.size == 200
    # 40 header + 8 int + 16 pointer and status, then 16 or 64 bytes of string, or all 136
    assert var.prefix_size == 64 and struct.calcsize(var.prefix_format) == 64
    assert var.sizes == (80, 128, 200)
    assert var.struct_format == fixed.struct_format  # the same C struct


def test_a_variable_record_decodes_as_the_whole_record_does() -> None:
    """Records cut to each reserved size give what the whole record gives; what follows
    the string's NUL (never written by the kernel) is ignored, as in a whole record."""
    whole = output(LONG, output_id=0)
    var = PrintOutput("out", "pr", RecordLayout(0, "pr_rec_0", LONG, variable=True), None)
    for text in (b"", b"a" * 15, b"b" * 16, b"c" * 63, b"d" * 64, b"e" * 128):
        raw = struct.pack(whole.layout.struct_format, 9, 0, 42, 43, b"wl", -1, 0x10,
                          STR_OK if len(text) < 128 else STR_TRUNCATED,
                          text + b"\0" + b"\xffstale"[: 128 - len(text)])
        size = next(s for s in var.layout.sizes if s - var.layout.prefix_size > len(text))
        got = Decoder([var]).decode_batch([raw[:size]])
        want = Decoder([whole]).decode_batch([raw])
        # (`time` is ts plus each decoder's wall-clock offset, taken when it is built:
        # two decoders may differ by a microsecond there; ts_ns is compared)
        assert [{**r, "time": None} for r in got] == [{**r, "time": None} for r in want]
        assert got[0]["s"] == text.decode() and got[0]["n"] == -1


def test_an_unreadable_string_of_a_variable_record_is_read_again_whole(monkeypatch) -> None:
    """The kernel could not read it (status < 0): the record holds one byte of it, and the
    read from user space still asks for the whole buffer's worth (size - 1 bytes)."""
    from planrunner.runtime import decode

    asked = []
    monkeypatch.setattr(decode, "reread_user_string",
                        lambda pid, ptr, size: asked.append(size) or b"later")
    var = PrintOutput("out", "pr", RecordLayout(0, "pr_rec_0", LONG, variable=True), None)
    raw = struct.pack(var.layout.prefix_format, 9, 0, 42, 43, b"wl", 5, 0x10, -14) + b"\0" * 16
    (rec,) = Decoder([var]).decode_batch([raw])
    assert rec["s"] == "later" and rec["reread"] == ["s"] and asked == [128]
