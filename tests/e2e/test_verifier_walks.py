"""What the kernel's verifier walks of a thunk (`verified_insns`, /proc/self/fdinfo of
the loaded program): a first run waits for it, ~10 ms per 10k instructions here.

A nested span's end searches the open begins for its own (`match:`); each turn the
search can leave at once gave the level the end closes other bounds, and the verifier
walked all that follows (the `where`, the records, the pop) once per turn: ruby-flow's
end thunk 127k instructions against its begin's 14k, 0.2 s of its first run. The level
is now read back from the scratch (render/spans.py `_match_search`), one unknown."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from planrunner.pipeline import compile_plan
from planrunner.runtime.bcc_backend import BASE_CFLAGS, btf_cflags, own_btf_cflags

ROOT = Path(__file__).resolve().parents[2]

# begin and end alike but for the end's search: the same `where` (a substring loop over
# a string) and a print of the same fields after it
PLAN = """planrunner: 1
name: span-search
targets:
  r: {{binary: {binary}}}
probes:
  enter:
    usdt: r:rec:enter
    args: [{{name: t}}, {{name: level}}]
    where: contains(comm, "rec") && level < 100
  exit:
    usdt: r:rec:exit
    args: [{{name: t}}, {{name: level}}]
    where: contains(comm, "rec") && level < 100
  call:
    span: {{begin: enter, end: exit, nested: true, match: [level, comm]}}
settings: {{span_depth: 16}}
outputs:
  - print: enter
    fields: [t, level, depth, comm]
  - print: exit
    fields: [t, level, depth, comm]
"""


def _verified(fd: int) -> int:
    found = re.search(r"^verified_insns:\s+(\d+)$",
                      Path(f"/proc/self/fdinfo/{fd}").read_text(), re.M)
    if not found:
        pytest.skip("this kernel's fdinfo has no verified_insns (Linux < 5.16)")
    return int(found.group(1))


def test_a_matching_end_is_walked_about_as_much_as_its_begin(tmp_path: Path) -> None:
    from bcc import BPF

    plan = tmp_path / "span-search.yaml"
    plan.write_text(PLAN.format(binary=ROOT / "tests/fixtures/elf/bin/recurse"))
    program = compile_plan(str(plan), {})[2]
    cflags = [*BASE_CFLAGS, *btf_cflags(program.btf_constants), *own_btf_cflags()]
    bpf = BPF(text=program.c_source.encode(), cflags=cflags)
    try:
        walked = {name: _verified(bpf.load_func(f"pr_{name}_s0".encode(), BPF.KPROBE).fd)
                  for name in ("enter", "exit")}
    finally:
        bpf.cleanup()
    # the search itself is 8 turns of a map lookup and a compare: a few hundred more;
    # what follows it, walked once per turn, made it 9x the begin
    assert walked["exit"] <= 2 * walked["enter"], walked
