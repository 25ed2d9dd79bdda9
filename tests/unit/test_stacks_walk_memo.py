"""stacks/walk_memo.py: a remembered walk is given only where the walk would give the
same, over the stack fixture's real dumps (tests/unit/stacks_fixture.py): every word of
the copy changed in turn, the copy cut short, the frame pointer changed. The memo's
answer must equal a plain walk of the changed copy each time, and a change the walk
never read (a local) must be a hit."""

from __future__ import annotations

from dataclasses import replace

import pytest
from stacks_fixture import VARIANTS, Dump, dumps_of, missing_toolchain, with_word

from planrunner.stacks.capture import StackWindow
from planrunner.stacks.unwind import unwind
from planrunner.stacks.walk_memo import WalkMemo

pytestmark = pytest.mark.skipif(missing_toolchain() is not None,
                                reason=missing_toolchain() or "")


@pytest.fixture(scope="module")
def dumps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Dump]:
    return dumps_of(tmp_path_factory, "memo")


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("mode", ["dwarf", "auto", "fp"])
def test_every_changed_word_gives_what_a_plain_walk_gives(
        dumps: dict[str, Dump], variant: str, mode: str) -> None:
    dump = dumps[variant]
    memo = WalkMemo()
    first = unwind(dump.capture, dump.modules, mode, memo=memo)
    assert first == unwind(dump.capture, dump.modules, mode)
    assert (memo.hits, memo.misses) == (0, 1)
    assert unwind(dump.capture, dump.modules, mode, memo=memo) == first
    assert memo.hits == 1
    words = min(len(dump.capture.window.data), 4096) // 8
    for i in range(words):
        for value in (0, 0x4141414141414141):
            changed = with_word(dump.capture, 8 * i, value)
            plain = unwind(changed, dump.modules, mode)
            assert unwind(changed, dump.modules, mode, memo=memo) == plain, (i, value)
    # most words are locals and padding: their change is no new walk
    assert memo.hits > words


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_copy_cut_short_and_another_frame_pointer(dumps: dict[str, Dump],
                                                    variant: str) -> None:
    dump = dumps[variant]
    memo = WalkMemo()
    w = dump.capture.window
    for mode in ("dwarf", "auto", "fp"):
        unwind(dump.capture, dump.modules, mode, memo=memo)
        for size in (0, 8, 64, 200, 1024, len(w.data) - 8):
            short = replace(dump.capture, window=StackWindow(w.base, w.data[:size]))
            assert (unwind(short, dump.modules, mode, memo=memo)
                    == unwind(short, dump.modules, mode)), (mode, size)
        for fp in (0, w.base + 64, w.end + 4096, dump.capture.regs.fp + 8):
            other = replace(dump.capture, regs=replace(dump.capture.regs, fp=fp))
            assert (unwind(other, dump.modules, mode, memo=memo)
                    == unwind(other, dump.modules, mode)), (mode, fp)


def test_a_walk_is_kept_per_process_maps(dumps: dict[str, Dump]) -> None:
    """Another maps snapshot (another process, or the same after an mmap) is another key,
    even with the same registers and words."""
    dump = dumps["nofp_pie"]
    memo = WalkMemo()
    unwind(dump.capture, dump.modules, "dwarf", memo=memo)
    again = replace(dump.modules)  # equal, but another snapshot
    assert unwind(dump.capture, again, "dwarf", memo=memo) == \
        unwind(dump.capture, dump.modules, "dwarf")
    assert (memo.hits, memo.misses) == (0, 2)
