"""ctypes types of a map's key and value, from the description the compiler kept.

bcc describes each map's key and value type as JSON (the `key_desc` / `leaf_desc` of
runtime/compile_cache.py MapDef, what libbcc's `bpf_table_key_desc_id` returns): a C
scalar's name (`"unsigned long long"`), or `[name, fields, kind]` with kind `struct`,
`struct_packed` or `union` and each field `[name, type]`, `[name, type, [n]]` (an
array), `[name, type, bits]` (a bitfield) or a nested description (anonymous when its
name is empty). runtime/aggregates.py reads the members by name, as of bcc's tables.

Decoded here, not by bcc, so that reading maps at stop (runtime/map_batch.py) needs no
bcc: a cached program's run never imports it, and a compiled one calls none of its
table code once tracing stops. No bcc here.
"""

from __future__ import annotations

import ctypes as ct
import json
from functools import cache
from typing import Any

# The C scalar names the compiler writes, and their ctypes.
_SCALARS: dict[str, Any] = {
    "_Bool": ct.c_bool, "bool": ct.c_bool,
    "char": ct.c_char, "signed char": ct.c_byte, "unsigned char": ct.c_ubyte,
    "short": ct.c_short, "unsigned short": ct.c_ushort,
    "int": ct.c_int, "unsigned int": ct.c_uint,
    "long": ct.c_long, "unsigned long": ct.c_ulong,
    "long long": ct.c_longlong, "unsigned long long": ct.c_ulonglong,
    "float": ct.c_float, "double": ct.c_double, "long double": ct.c_longdouble,
    "void *": ct.c_void_p,
    "__int128": ct.c_ubyte * 16, "unsigned __int128": ct.c_ubyte * 16,
}
_KINDS = {"struct": ct.Structure, "struct_packed": ct.Structure, "union": ct.Union}


class UnknownType(ValueError):
    """A description this decoder does not know (the map is then not readable here)."""


@cache
def decode_desc(desc: str) -> Any:
    """The ctypes type of a JSON type description (empty: `int`, as bcc assumes)."""
    if not desc:
        return ct.c_int
    try:
        return _decode(json.loads(desc))
    except (ValueError, TypeError, IndexError) as exc:
        raise UnknownType(f"cannot decode map type {desc[:80]!r}: {exc}") from None


def _decode(desc: Any) -> Any:
    if isinstance(desc, str):
        if desc not in _SCALARS:
            raise UnknownType(f"unknown C type {desc!r}")
        return _SCALARS[desc]
    name, members, kind = desc[0], desc[1], desc[2] if len(desc) > 2 else "struct"
    base = _KINDS.get(kind)
    if base is None:
        raise UnknownType(f"unknown aggregate kind {kind!r}")
    fields: list[tuple[Any, ...]] = []
    anonymous: list[str] = []
    for member in members:
        if len(member) == 2:
            fields.append((member[0], _decode(member[1])))
        elif len(member) == 3 and isinstance(member[2], list):  # an array
            fields.append((member[0], _decode(member[1]) * int(member[2][0])))
        elif len(member) == 3 and isinstance(member[2], int):  # a bitfield
            fields.append((member[0], _decode(member[1]), member[2]))
        elif len(member) == 3 and member[2] in _KINDS:  # a nested struct or union
            field = member[0] or f"__anon{len(anonymous)}"
            if not member[0]:
                anonymous.append(field)
            fields.append((field, _decode(member)))
        else:
            raise UnknownType(f"unknown member {member!r}")
    attrs: dict[str, Any] = {"_fields_": fields, "_anonymous_": anonymous}
    if kind == "struct_packed":
        attrs["_pack_"] = 1
    return type(str(name) or "anon", (base,), attrs)


def per_cpu_slot(value_type: Any) -> Any:
    """The type of one CPU's slot of a per-CPU value: the kernel copies each CPU's value
    8-byte aligned (round_up(value_size, 8) bytes)."""
    size = ct.sizeof(value_type)
    if size % 8 == 0:
        return value_type
    pad = 8 - size % 8
    if issubclass(value_type, (ct.Structure, ct.Union)):
        return type(f"{value_type.__name__}_slot", (ct.Structure,),
                    {"_fields_": [("value", value_type), ("_pad", ct.c_ubyte * pad)],
                     "_anonymous_": ["value"]})
    # a scalar narrower than 8 bytes: read as the unsigned 64-bit slot (the kernel's
    # padding is zero; planrunner's per-CPU maps hold 64-bit values anyway)
    return ct.c_uint64
