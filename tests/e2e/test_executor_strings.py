"""Strings read for real at and past the limit: `type: string` args (settings.string_size
and per-arg `size:`), a string retval, `str(x)`, `str(x, n)` with a constant and with a
length argument; NULL gives null; non-UTF-8 bytes are escaped, never a crash; the text
view marks a cut string with a trailing `…`."""

from __future__ import annotations

from tests.e2e.conftest import json_records, run_planrunner, write_plan

# strings.c TEXT(k): 127 x a, 128 x b, 129 x c, NULL, non-UTF-8, ""
TEXTS = ["a" * 127, "b" * 128, "c" * 129, None, "caf\\xe9 \\xff\\xfe ok", ""]
LIMIT = 128


def cut(text: str | None, n: int) -> tuple[str | None, bool]:
    """What a reader limited to n bytes of content reports (escapes count as 1 byte)."""
    if text is None:
        return None, False
    raw = text.encode().decode("unicode_escape").encode("latin-1")
    shown = raw[:n].decode("utf-8", "backslashreplace")
    return shown, len(raw) > n


PLAN = """
planrunner: 1
name: strings
targets:
  s: {{binary: {b}}}
settings: {{string_size: {limit}}}
probes:
  text:
    usdt: s:str:text
    args: [{{name: k}}, {{name: s, type: string}}, {{name: len}}]
  raw: {{usdt: s:str:text}}
  pick:
    uprobe: s:str_pick
    args: [{{name: k, type: int32}}, {{name: big, type: int64}}, {{name: s, type: string, size: 8}}]
  ret:
    uretprobe: s:str_pick
    retval: {{type: string}}
outputs:
  - print: text
    fields: [k, s]
  - print: raw
    fields: [{{n: "str(arg2, arg3)"}}, {{c: "str(arg2, 4)"}}, {{d: "str(arg2)"}}]
  - print: pick
    fields: [k, s]
  - print: ret
    fields: [retval]
"""


def _truncated(rec: dict, key: str) -> bool:
    return key in rec.get("truncated", [])


def test_strings_at_and_past_the_limit(fixtures_built, tmp_path):
    b = fixtures_built / "strings"
    plan = write_plan(tmp_path, PLAN.format(b=b, limit=LIMIT))
    proc = run_planrunner(["run", plan, "-f", "json", "-c", f"{b} 1"])
    assert proc.returncode == 0, proc.stderr
    recs = json_records(proc.stdout)
    by = {p: [r for r in recs if r["probe"] == p] for p in ("text", "raw", "pick", "ret")}
    assert all(len(v) == 6 for v in by.values()), proc.stdout
    for k, text in enumerate(TEXTS):
        want, cut_ = cut(text, LIMIT)
        t = by["text"][k]
        assert (t["k"], t["s"], _truncated(t, "s")) == (k, want, cut_)
        r = by["ret"][k]
        assert (r["retval"], _truncated(r, "retval")) == (want, cut_)
        want8, cut8 = cut(text, 8)  # per-arg size: 8
        p = by["pick"][k]
        assert (p["s"], _truncated(p, "s")) == (want8, cut8)
        raw = by["raw"][k]
        assert (raw["d"], _truncated(raw, "d")) == (want, cut_)
        assert (raw["c"], _truncated(raw, "c")) == cut(text, 4)
        # str(ptr, len): exactly len bytes (len is strlen here), capped at the limit
        assert (raw["n"], _truncated(raw, "n")) == (want, cut_)
    # the exact edges: 127 and 128 bytes fit, 129 is cut to 128
    assert [_truncated(t, "s") for t in by["text"][:3]] == [False, False, True]
    assert len(by["text"][2]["s"]) == LIMIT


def test_text_view_marks_truncation_and_survives_bad_utf8(fixtures_built, tmp_path):
    b = fixtures_built / "strings"
    plan = write_plan(tmp_path, PLAN.format(b=b, limit=LIMIT))
    proc = run_planrunner(["run", plan, "-c", f"{b} 1"])
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if " text " in ln]
    assert len(lines) == 6, proc.stdout
    assert lines[1].endswith("b" * 128) and not lines[1].endswith("…")
    assert lines[2].endswith("c" * 128 + "…")
    assert "caf" in lines[4] and "Traceback" not in proc.stderr
