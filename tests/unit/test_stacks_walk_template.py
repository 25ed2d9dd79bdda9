"""stacks/walk_template.py: a capture the BPF side's match takes for a template walks
as the template's walk did, over the stack fixture's real dumps (tests/unit/
stacks_fixture.py): every word of the copy changed in turn, the frame pointer changed.
A change the walk used must fail the match (else its walk would be another's), and a
change of a word it never used (a local) must pass it (else no sample is ever light)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from stacks_fixture import VARIANTS, Dump, dumps_of, missing_toolchain, with_word

from planrunner.render.contracts import TEMPLATE_WORDS
from planrunner.stacks.capture import StackWindow
from planrunner.stacks.unwind import unwind
from planrunner.stacks.walk_memo import WalkMemo
from planrunner.stacks.walk_template import at_pc, first_span, holds, template_walk

pytestmark = pytest.mark.skipif(missing_toolchain() is not None,
                                reason=missing_toolchain() or "")


@pytest.fixture(scope="module")
def dumps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Dump]:
    return dumps_of(tmp_path_factory, "tmpl")


def memo_for(dump: Dump, mode: str, memo: str) -> WalkMemo | None:
    """No memo, a memo that has not seen this stack, or one that has (then the walk
    from the caller on is a hit, and only the memo's comparisons say what it used)."""
    if memo == "none":
        return None
    walks = WalkMemo()
    if memo == "warm":
        unwind(dump.capture, dump.modules, mode, 127, memo=walks)
        assert walks.misses == 1
    return walks


@pytest.mark.parametrize("memo", ["none", "cold", "warm"])
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("mode", ["dwarf", "auto", "fp"])
def test_a_capture_the_match_takes_walks_as_the_template(
        dumps: dict[str, Dump], variant: str, mode: str, memo: str) -> None:
    dump = dumps[variant]
    walks = memo_for(dump, mode, memo)
    walked, template = template_walk(dump.capture, dump.modules, mode, 127, None, walks)
    if memo == "warm" and walks is not None and len(walked.addrs) > 2:
        assert walks.hits == 1
    assert walked == unwind(dump.capture, dump.modules, mode, 127)
    if not (mode == "fp" and variant.startswith("nofp")):  # (no chain to follow there)
        assert len(walked.addrs) >= 5  # the fixture's chain, at least
    assert template is not None and 0 < len(template.words) <= TEMPLATE_WORDS
    assert holds(template, dump.capture)
    taken = refused = 0
    words = min(len(dump.capture.window.data), 4096) // 8
    for i in range(words):
        changed = with_word(dump.capture, 8 * i, 0x4141414141414141)
        if changed.window.data == dump.capture.window.data:
            continue
        if holds(template, changed):
            taken += 1
            assert unwind(changed, dump.modules, mode, 127) == walked, i
        else:
            refused += 1
            assert any(off == 8 * i for off, _ in template.words)
    # every used word changed (those within the words changed here: in `fp` mode over a
    # build without frame pointers, rbp holds a local and may point anywhere)
    assert refused == sum(1 for off, word in template.words
                          if off < 8 * words and word != 0x4141414141414141)
    assert taken > refused  # most words are locals and padding


@pytest.mark.parametrize("memo", ["none", "warm"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_the_frame_pointer_is_compared_where_the_walk_used_it(
        dumps: dict[str, Dump], variant: str, memo: str) -> None:
    dump = dumps[variant]
    for mode in ("dwarf", "auto", "fp"):
        walked, template = template_walk(dump.capture, dump.modules, mode, 127, None,
                                         memo_for(dump, mode, memo))
        assert template is not None
        for fp in (0, dump.capture.regs.fp + 8):
            other = replace(dump.capture, regs=replace(dump.capture.regs, fp=fp))
            if holds(template, other):
                assert template.fp is None
                assert unwind(other, dump.modules, mode, 127) == walked, (mode, fp)
            else:
                assert template.fp == dump.capture.regs.fp
        if mode == "fp":  # the frame-pointer walk starts from it
            assert template.fp == dump.capture.regs.fp


def test_another_key_is_not_taken(dumps: dict[str, Dump]) -> None:
    dump = dumps["nofp_pie"]
    _, template = template_walk(dump.capture, dump.modules, "dwarf", 127, None)
    assert template is not None
    w, r = dump.capture.window, dump.capture.regs
    assert not holds(template, replace(dump.capture, pid=dump.capture.pid + 1))
    assert not holds(template, replace(dump.capture, regs=replace(r, pc=r.pc + 1)))
    shifted = replace(dump.capture, regs=replace(r, sp=r.sp + 8),
                      window=StackWindow(w.base + 8, w.data))
    assert not holds(template, shifted)
    assert not holds(template, replace(dump.capture, window=StackWindow(w.base, w.data[:-8])))


@pytest.mark.parametrize("memo", ["none", "warm"])
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("mode", ["dwarf", "auto"])
def test_a_capture_at_another_pc_of_the_span_walks_as_the_template_from_its_pc(
        dumps: dict[str, Dump], variant: str, mode: str, memo: str) -> None:
    """first_span: the BPF side takes a template of a span for a sample at any pc of it
    (render/stacks.py); over the real dumps, a capture moved to every pc of the span
    walks as the template did but for its first address, and its words changed where
    the template did not use them walk so too. (A build with frame pointers takes its
    CFA from rbp in a function's body: no span there.)"""
    dump = dumps[variant]
    walked, template = template_walk(dump.capture, dump.modules, mode, 127, None,
                                     memo_for(dump, mode, memo))
    assert template is not None
    span = first_span(dump.capture.regs.pc, dump.modules, dump.capture.arch)
    if variant.startswith("fp"):
        assert span is None or span[1] - span[0] >= 1
        if span is None:
            return
    assert span is not None and span[0] <= dump.capture.regs.pc < span[1]
    mapping = dump.modules.find(dump.capture.regs.pc)
    assert mapping is not None and mapping.start <= span[0] and span[1] <= mapping.end
    used = {off for off, _ in template.words}
    local = next(off for off in range(0, len(dump.capture.window.data), 8)
                 if off not in used)
    moved_pcs = range(span[0], span[1])
    assert len(moved_pcs) > 1
    for pc in moved_pcs:
        moved = replace(dump.capture, regs=replace(dump.capture.regs, pc=pc))
        assert unwind(moved, dump.modules, mode, 127) == at_pc(walked, pc), hex(pc)
        changed = with_word(moved, local, 0x4141414141414141)
        assert unwind(changed, dump.modules, mode, 127) == at_pc(walked, pc), hex(pc)


def test_a_span_stops_where_its_row_does(dumps: dict[str, Dump]) -> None:
    """Just past the span the CFI row differs: the same capture there walks otherwise
    (its first step reads the return address elsewhere), which is why the BPF side
    checks the span's bounds."""
    dump = dumps["nofp_pie"]
    walked = unwind(dump.capture, dump.modules, "dwarf", 127)
    span = first_span(dump.capture.regs.pc, dump.modules, dump.capture.arch)
    assert span is not None
    differ = 0
    for pc in (span[0] - 1, span[1]):
        moved = replace(dump.capture, regs=replace(dump.capture.regs, pc=pc))
        differ += unwind(moved, dump.modules, "dwarf", 127) != at_pc(walked, pc)
    assert differ >= 1
