"""A minimal writer of pprof's `profile.proto` (github.com/google/pprof, proto/profile.proto,
package perftools.profiles): `ProfileBuilder` interns strings, mappings, functions and
locations and `encode()` gives the serialized `Profile` (not gzipped: the caller gzips,
as the format requires on disk).

Only the protobuf wire format's two wire types this needs are written: varint (0) for
integers and bools, length-delimited (2) for strings, embedded messages and packed
repeated integers (proto3 packs them; readers accept packed or not). A field at its
default value (0, "", false) is left out, as proto3 does. Field numbers are those of
profile.proto, cited next to each message's writer below.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_VARINT, _LEN = 0, 2
_U64 = (1 << 64) - 1


def varint(value: int) -> bytes:
    """Base-128 varint; a negative int64 as its two's complement (ten bytes)."""
    value &= _U64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _int(field: int, value: int) -> bytes:
    return varint(field << 3 | _VARINT) + varint(value) if value else b""


def _bytes(field: int, data: bytes) -> bytes:
    return varint(field << 3 | _LEN) + varint(len(data)) + data


def _packed(field: int, values: Sequence[int]) -> bytes:
    return _bytes(field, b"".join(varint(v) for v in values)) if values else b""


@dataclass(frozen=True, slots=True)
class Label:
    """Sample.label: `key` with either a string or a number value (string indices are
    resolved by the builder)."""

    key: str
    str_value: str | None = None
    num: int = 0


@dataclass(frozen=True, slots=True)
class _Sample:
    location_ids: tuple[int, ...]
    values: tuple[int, ...]
    labels: tuple[Label, ...]


class ProfileBuilder:
    """Collects one Profile. Ids start at 1 (0 means "none" in profile.proto);
    string_table[0] is "" as the format requires."""

    def __init__(self, sample_types: Sequence[tuple[str, str]]) -> None:
        self.strings: list[str] = [""]
        self._string_ids: dict[str, int] = {"": 0}
        self.sample_types = [(self.string(t), self.string(u)) for t, u in sample_types]
        self.samples: list[_Sample] = []
        self.mappings: dict[tuple[int, int, int, str, str], int] = {}
        self.functions: dict[tuple[str, str, int], int] = {}
        self.locations: dict[tuple[int, int, int, int], int] = {}
        self.period_type: tuple[int, int] | None = None
        self.period = 0
        self.time_nanos = 0
        self.duration_nanos = 0
        self.comments: list[int] = []
        self.default_sample_type = 0
        # mappings some of whose locations have no name: has_functions false, so that
        # a reader may symbolize them from the file
        self.unnamed_mappings: set[int] = set()
        # mappings with source files and lines: has_filenames, has_line_numbers
        self.lined_mappings: set[int] = set()

    def string(self, text: str) -> int:
        index = self._string_ids.get(text)
        if index is None:
            index = self._string_ids[text] = len(self.strings)
            self.strings.append(text)
        return index

    def mapping(self, start: int, limit: int, file_offset: int, path: str,
                build_id: str = "") -> int:
        """The id of this mapping (one per distinct range and file)."""
        key = (start, limit, file_offset, path, build_id)
        got = self.mappings.get(key)
        if got is None:
            self.string(path), self.string(build_id)
            got = self.mappings[key] = len(self.mappings) + 1
        return got

    def function(self, name: str, filename: str = "", start_line: int = 0) -> int:
        key = (name, filename, start_line)
        got = self.functions.get(key)
        if got is None:
            self.string(name), self.string(filename)
            got = self.functions[key] = len(self.functions) + 1
        return got

    def location(self, mapping_id: int, address: int, function_id: int,
                 line: int = 0) -> int:
        """A location with one Line (no inline frames: the symbolizer names the
        outermost function at an address), none when `function_id` is 0 (unknown)."""
        key = (mapping_id, address, function_id, line)
        got = self.locations.get(key)
        if got is None:
            got = self.locations[key] = len(self.locations) + 1
        return got

    def sample(self, location_ids: Sequence[int], values: Sequence[int],
               labels: Iterable[Label] = ()) -> None:
        """A sample: location ids leaf first (location_id[0] is the leaf)."""
        if len(values) != len(self.sample_types):
            raise ValueError(f"{len(values)} values for {len(self.sample_types)} sample types")
        labels = tuple(labels)
        for label in labels:
            self.string(label.key)
            if label.str_value is not None:
                self.string(label.str_value)
        self.samples.append(_Sample(tuple(location_ids), tuple(values), labels))

    # --- encoding ----------------------------------------------------------------

    def encode(self) -> bytes:
        """The serialized Profile message (Profile field numbers in the comments)."""
        s = self._string_ids
        out = bytearray()
        for type_, unit in self.sample_types:  # 1: repeated ValueType sample_type
            out += _bytes(1, _value_type(type_, unit))
        for smp in self.samples:  # 2: repeated Sample sample
            out += _bytes(2, _sample(smp, s))
        for (start, limit, offset, path, build_id), mid in self.mappings.items():
            # 3: repeated Mapping mapping
            out += _bytes(3, _mapping(mid, start, limit, offset, s[path], s[build_id],
                                      mid not in self.unnamed_mappings,
                                      mid in self.lined_mappings))
        for (mapping_id, address, function_id, line), lid in self.locations.items():
            # 4: repeated Location location
            out += _bytes(4, _location(lid, mapping_id, address, function_id, line))
        for (name, filename, start_line), fid in self.functions.items():
            # 5: repeated Function (1 id, 2 name, 3 system_name, 4 filename,
            # 5 start_line)
            out += _bytes(5, _int(1, fid) + _int(2, s[name]) + _int(3, s[name])
                          + _int(4, s[filename]) + _int(5, start_line))
        for text in self.strings:  # 6: repeated string string_table ([0] = "")
            out += _bytes(6, text.encode("utf-8", "backslashreplace"))
        out += _int(9, self.time_nanos) + _int(10, self.duration_nanos)
        if self.period_type is not None:  # 11: ValueType period_type, 12: int64 period
            out += _bytes(11, _value_type(*self.period_type))
        out += _int(12, self.period)
        out += _packed(13, self.comments)  # 13: repeated int64 comment
        out += _int(14, self.default_sample_type)  # 14: int64 default_sample_type
        return bytes(out)


def _value_type(type_: int, unit: int) -> bytes:
    return _int(1, type_) + _int(2, unit)  # ValueType: 1 type, 2 unit


def _sample(smp: _Sample, s: dict[str, int]) -> bytes:
    # Sample: 1 repeated uint64 location_id, 2 repeated int64 value, 3 repeated Label
    out = _packed(1, smp.location_ids) + _packed(2, smp.values)
    for label in smp.labels:  # Label: 1 key, 2 str, 3 num (strings as indices)
        str_index = s[label.str_value] if label.str_value is not None else 0
        out += _bytes(3, _int(1, s[label.key]) + _int(2, str_index) + _int(3, label.num))
    return out


def _mapping(mid: int, start: int, limit: int, offset: int, filename: int,
             build_id: int, has_functions: bool, has_lines: bool) -> bytes:
    # Mapping: 1 id, 2 memory_start, 3 memory_limit, 4 file_offset, 5 filename,
    # 6 build_id, 7 has_functions, 8 has_filenames, 9 has_line_numbers
    return (_int(1, mid) + _int(2, start) + _int(3, limit) + _int(4, offset)
            + _int(5, filename) + _int(6, build_id) + _int(7, int(has_functions))
            + _int(8, int(has_lines)) + _int(9, int(has_lines)))


def _location(lid: int, mapping_id: int, address: int, function_id: int,
              line: int) -> bytes:
    # Location: 1 id, 2 mapping_id, 3 address, 4 repeated Line (Line: 1 function_id,
    # 2 line)
    lines = _bytes(4, _int(1, function_id) + _int(2, line)) if function_id else b""
    return _int(1, lid) + _int(2, mapping_id) + _int(3, address) + lines
