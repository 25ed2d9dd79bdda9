"""decode_stapsdt / iter_notes on hand-built bytes: both classes, both byte orders."""

from __future__ import annotations

import struct

import pytest

from planrunner.elf.stapsdt import ELFCLASS32, ELFCLASS64, NoteRecord, decode_stapsdt, iter_notes


def desc(words: tuple[int, int, int], strings: tuple[bytes, ...], fmt: str) -> bytes:
    return struct.pack(fmt, *words) + b"".join(s + b"\0" for s in strings)


def note(owner: bytes, ntype: int, payload: bytes, order: str = "<", align: int = 4) -> bytes:
    def pad(b: bytes) -> bytes:
        return b + b"\0" * (-len(b) % align)
    owner_z = owner + b"\0"
    return struct.pack(order + "III", len(owner_z), len(payload), ntype) + pad(owner_z) + \
        pad(payload)


@pytest.mark.parametrize(("elfclass", "little", "fmt"), [
    (ELFCLASS64, True, "<QQQ"), (ELFCLASS64, False, ">QQQ"),
    (ELFCLASS32, True, "<III"), (ELFCLASS32, False, ">III"),
])
def test_decode_each_class_and_byte_order(elfclass: int, little: bool, fmt: str) -> None:
    big = 0xFFFF_FFF0 if elfclass == ELFCLASS32 else 0x7FFF_0000_1234
    raw = desc((0x401126, big, 0xA84276), (b"python", b"gc__start", b"-4@112(%rsp)"), fmt)
    rec = decode_stapsdt(raw, elfclass, little)
    assert rec == NoteRecord(0x401126, big, 0xA84276, "python", "gc__start", "-4@112(%rsp)")


def test_wrong_byte_order_gives_other_numbers() -> None:
    raw = desc((0x1122, 0, 0), (b"p", b"n", b""), "<QQQ")
    assert decode_stapsdt(raw, ELFCLASS64, False).pc == 0x2211 << 48


def test_empty_arguments_and_no_semaphore() -> None:
    rec = decode_stapsdt(desc((0x1135, 0x2004, 0), (b"demo", b"noargs", b""), "<QQQ"),
                         ELFCLASS64, True)
    assert (rec.args, rec.semaphore, rec.name) == ("", 0, "noargs")


def test_padding_after_strings_is_ignored() -> None:
    raw = desc((1, 2, 3), (b"p", b"n", b"8@%rax"), "<QQQ") + b"\0\0\0"
    assert decode_stapsdt(raw, ELFCLASS64, True).args == "8@%rax"


@pytest.mark.parametrize(("raw", "message"), [
    (b"\0" * 10, "too short"),
    (struct.pack("<QQQ", 1, 2, 3) + b"prov\0name\0args", "NUL-terminated"),
    (desc((1, 2, 3), (b"", b"n", b""), "<QQQ"), "empty provider"),
])
def test_malformed_payloads_raise(raw: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode_stapsdt(raw, ELFCLASS64, True)


def test_unknown_class_raises() -> None:
    with pytest.raises(ValueError, match="ELF class"):
        decode_stapsdt(b"\0" * 40, 3, True)


@pytest.mark.parametrize("order", ["<", ">"])
def test_iter_notes_walks_owners_types_and_padding(order: str) -> None:
    first = desc((1, 2, 0), (b"a", b"bb", b"8@%rax"), order + "QQQ")
    data = note(b"GNU", 3, b"\x12\x34\x56", order) + note(b"stapsdt", 3, first, order)
    got = list(iter_notes(data, order == "<"))
    assert got == [("GNU", 3, b"\x12\x34\x56"), ("stapsdt", 3, first)]


def test_iter_notes_with_eight_byte_alignment() -> None:
    # As in .note.gnu.property of ELFCLASS64: offsets are aligned from the section start,
    # so "GNU\0" after the 12-byte header ends on 16 and the descriptor follows at once.
    first = struct.pack("<III", 4, 5, 5) + b"GNU\0" + b"\1\2\3\4\5" + b"\0" * 3
    second = struct.pack("<III", 2, 1, 1) + b"X\0" + b"\0" * 2 + b"z" + b"\0" * 7
    got = list(iter_notes(first + second, True, align=8))
    assert got == [("GNU", 5, b"\1\2\3\4\5"), ("X", 1, b"z")]


def test_iter_notes_rejects_a_note_past_the_end() -> None:
    data = struct.pack("<III", 8, 100, 3) + b"stapsdt\0" + b"short"
    with pytest.raises(ValueError, match="past the end"):
        list(iter_notes(data, True))
