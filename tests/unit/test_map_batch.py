"""runtime/map_batch.py and runtime/map_types.py without the kernel: how many bytes a
value takes in a batch (the attrs: tests/unit/test_kernel_attrs.py), and the decoding of
what a read returned into the ctypes keys and values runtime/aggregates.py reads.
(The syscalls themselves, batch and key-by-key, against real maps:
tests/e2e/test_stop_without_bcc.py.)"""

from __future__ import annotations

import ctypes as ct
import struct

import pytest

from planrunner.runtime.map_batch import (
    Entries,
    MapRef,
    possible_cpus,
    typed,
    u64_total,
    value_width,
)
from planrunner.runtime.map_types import UnknownType, decode_desc, per_cpu_slot
from planrunner.runtime.ringbuf import possible_cpus as read_possible


def test_per_cpu_values_take_an_aligned_slot_per_possible_cpu() -> None:
    assert value_width(8, per_cpu=True, cpus=4) == 32
    assert value_width(12, per_cpu=True, cpus=3) == 48  # each slot rounded up to 8
    assert value_width(1, per_cpu=True, cpus=1) == 8
    assert value_width(12, per_cpu=False, cpus=64) == 12  # one copy, as it is


def test_possible_cpus_is_read_once_and_agrees_with_the_file() -> None:
    assert possible_cpus() == read_possible()
    assert possible_cpus.cache_info().currsize == 1


def test_u64_total_sums_every_slot_of_every_entry() -> None:
    assert u64_total(struct.pack("<4Q", 1, 2, 3, 1 << 40)) == 6 + (1 << 40)
    assert u64_total(b"") == 0


KEY = '["pr_agg_0_key", [["k0","long long"], ["k1","char", [16]], ["k2","_Bool"] ], ' \
      '"struct_packed"]'
AVG = '["pr_avg", [["n","unsigned long long"], ["sum","long long"] ], "struct_packed"]'


def test_descriptions_decode_to_the_c_layout() -> None:
    key = decode_desc(KEY)
    assert ct.sizeof(key) == 8 + 16 + 1  # packed: no tail padding
    k = key.from_buffer_copy(struct.pack("<q16s?", -5, b"caf\xc3\xa9", True))
    assert (k.k0, k.k1, k.k2) == (-5, b"caf\xc3\xa9", True)
    assert decode_desc('"unsigned long long"') is ct.c_ulonglong
    assert decode_desc("") is ct.c_int  # no description: an int, as bcc assumes
    assert decode_desc(KEY) is key  # decoded once per description


def test_nested_unions_arrays_and_bitfields_decode() -> None:
    desc = ('["outer", [["a","unsigned int", 3], ["b","unsigned int", 5], '
            '["", [["x","int"], ["y","unsigned char"]], "union"], '
            '["ids","unsigned long long", [2]] ], "struct"]')
    t = decode_desc(desc)
    v = t()
    v.a, v.b, v.x, v.ids[1] = 5, 17, -2, 9
    assert (v.a, v.b, v.x, v.ids[1], v.y) == (5, 17, -2, 9, 0xFE)  # x's low byte


@pytest.mark.parametrize("desc", ['"float128"', '["s", [["a","int"]], "enum"]',
                                  '["s", [["a","int","x","y"]], "struct"]', "{not json"])
def test_unknown_descriptions_are_refused(desc: str) -> None:
    with pytest.raises(UnknownType):
        decode_desc(desc)


def test_a_per_cpu_slot_is_padded_to_eight_bytes() -> None:
    odd = decode_desc('["odd", [["n","unsigned int"]], "struct_packed"]')
    slot = per_cpu_slot(odd)
    assert ct.sizeof(slot) == 8
    assert slot.from_buffer_copy(struct.pack("<I4x", 7)).n == 7  # fields reachable
    assert per_cpu_slot(ct.c_uint64) is ct.c_uint64
    assert per_cpu_slot(ct.c_uint32) is ct.c_uint64


def _ref(key_desc: str, leaf_desc: str, key_size: int, value_size: int,
         map_type: int) -> MapRef:
    return MapRef("pr_agg_0", -1, map_type, key_size, value_size, 100, key_desc, leaf_desc)


def test_typed_entries_of_a_per_cpu_hash() -> None:
    cpus = possible_cpus()
    ref = _ref(KEY, AVG, 25, 16, map_type=5)
    keys = struct.pack("<q16s?", 1, b"a", False) + struct.pack("<q16s?", 2, b"b", True)
    values = b"".join(struct.pack("<Qq", n, -10 * n) for n in range(1, cpus + 1)) + \
        b"".join(struct.pack("<Qq", 0, 0) for _ in range(cpus))
    items = typed(ref, Entries(2, keys, values))
    assert [(k.k0, k.k1, k.k2) for k, _v in items] == [(1, b"a", False), (2, b"b", True)]
    first = items[0][1]
    assert len(first) == cpus
    assert [(c.n, c.sum) for c in first] == [(n, -10 * n) for n in range(1, cpus + 1)]
    assert [c.n for c in items[1][1]] == [0] * cpus


def test_typed_entries_are_copies_not_views_of_the_read() -> None:
    ref = _ref('"int"', '"unsigned long long"', 4, 8, map_type=1)  # plain hash
    keys = bytearray(struct.pack("<ii", 3, 4))
    items = typed(ref, Entries(2, bytes(keys), struct.pack("<QQ", 30, 40)))
    keys[:] = b"\0" * 8
    assert items == [(3, 30), (4, 40)]  # scalars, as bcc hands back a scalar key


def test_typed_refuses_types_that_are_not_the_kernels_sizes() -> None:
    ref = _ref('"int"', '"unsigned long long"', 8, 8, map_type=1)  # key: 8 bytes, not 4
    with pytest.raises(ValueError, match="not the kernel's"):
        typed(ref, Entries(1, b"\0" * 8, b"\0" * 8))
    assert typed(ref, Entries(0, b"", b"")) == []


def test_a_chunk_of_big_values_stays_small() -> None:
    from planrunner.runtime.map_batch import CHUNK_BYTES, FIRST_CHUNK, first_chunk

    assert first_chunk(MapRef("m", -1, 1, 8, 8, 10240), 8) == FIRST_CHUNK
    assert first_chunk(MapRef("m", -1, 1, 8, 8, 10), 8) == 10  # the map's size at most
    big = first_chunk(MapRef("m", -1, 1, 8, 16432, 2048), 16432)  # stack copies
    assert big * (8 + 16432) <= CHUNK_BYTES and big >= 1
    assert first_chunk(MapRef("m", -1, 1, 8, 1 << 20, 4), 1 << 20) == 1
