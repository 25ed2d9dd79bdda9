"""A yes/no schema check for the common case, a plan without schema mistakes, that needs
no jsonschema: importing jsonschema (with referencing, attrs, its format checkers) took
~75 ms, about half of `planrunner validate` against libjvm.so.

`conforms(instance, schema)` is True only when Draft 2020-12 (as jsonschema 4.x applies
it, format not asserted) finds no error. It implements, exactly, the keywords that
schema/plan.schema.json uses; anything it is not sure of (a keyword it does not know, a
`$ref` other than `#/$defs/NAME`, a key that is not a string, a value of a type JSON
does not have) makes it answer False, and the caller then runs jsonschema, which also
words the diagnostics (plan/validate.py). So a False is never wrong to give, a True must
be exact: every keyword here is evaluated as jsonschema evaluates it (including inside
oneOf, where an inexact branch would miscount), and tests/unit/test_schema_quick.py
compares the two on every shipped plan and on mutations of them.
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Mapping, Sequence
from typing import Any

# Keywords without an assertion (annotations, the definitions container).
_IGNORED = frozenset({"$schema", "$id", "$comment", "$defs", "title", "description",
                      "default", "examples", "deprecated", "readOnly", "writeOnly"})
_CHECKED = frozenset({"type", "properties", "patternProperties", "additionalProperties",
                      "required", "propertyNames", "minProperties", "maxProperties",
                      "items", "minItems", "maxItems", "minLength", "pattern", "minimum",
                      "maximum", "enum", "const", "oneOf", "$ref"})
_JSON_TYPES = (dict, list, str, int, float, bool, type(None))


class _Unsure(Exception):
    """Something this checker does not evaluate exactly: defer to jsonschema."""


def supported(schema: object, root: bool = True) -> bool:
    """True if every keyword in `schema` (recursively) is one conforms() evaluates."""
    if isinstance(schema, bool):
        return True
    if not isinstance(schema, dict):
        return False
    for key, value in schema.items():
        if key not in _CHECKED and key not in _IGNORED:
            return False
        if key == "$id" and not root:  # a nested $id would move the base of "#/$defs/"
            return False
        if key == "$ref" and not (isinstance(value, str) and value.startswith("#/$defs/")
                                  and not re.search(r"[/~%]", value[len("#/$defs/"):])):
            return False
        if key in ("properties", "patternProperties", "$defs"):
            if not isinstance(value, dict) or not all(supported(s, False)
                                                      for s in value.values()):
                return False
        elif key in ("additionalProperties", "propertyNames", "items"):
            if not supported(value, False):
                return False
        elif key == "oneOf":
            if not isinstance(value, list) or not all(supported(s, False) for s in value):
                return False
    return True


def conforms(instance: object, schema: dict[str, Any]) -> bool:
    """True only if `instance` has no error against `schema` (see the module docstring)."""
    if not supported(schema):
        return False
    try:
        return _valid(instance, schema, schema.get("$defs", {}))
    except (_Unsure, RecursionError, TypeError, re.error):
        return False


def _is_type(instance: object, name: str) -> bool:
    # jsonschema's Draft 2020-12 type checker: bool is not a number; 1.0 is an integer.
    if name == "object":
        return isinstance(instance, dict)
    if name == "array":
        return isinstance(instance, list)
    if name == "string":
        return isinstance(instance, str)
    if name == "boolean":
        return isinstance(instance, bool)
    if name == "null":
        return instance is None
    if isinstance(instance, bool):
        return False
    if name == "integer":
        return isinstance(instance, int) or (isinstance(instance, float)
                                             and instance.is_integer())
    if name == "number":
        return isinstance(instance, numbers.Number)
    raise _Unsure(name)


def _unbool(value: object, true: object = object(), false: object = object()) -> object:
    if value is True:
        return true
    if value is False:
        return false
    return value


def _equal(one: object, two: object) -> bool:
    # jsonschema._utils.equal: True is not 1, recursively.
    if one is two:
        return True
    if isinstance(one, str) or isinstance(two, str):
        return one == two
    if isinstance(one, Sequence) and isinstance(two, Sequence):
        return len(one) == len(two) and all(_equal(a, b) for a, b in zip(one, two, strict=True))
    if isinstance(one, Mapping) and isinstance(two, Mapping):
        return (len(one) == len(two)
                and all(k in two and _equal(v, two[k]) for k, v in one.items()))
    return _unbool(one) == _unbool(two)


def _valid(instance: object, schema: object, defs: dict[str, Any]) -> bool:
    if schema is True:
        return True
    if schema is False:
        return False
    assert isinstance(schema, dict)
    if not isinstance(instance, _JSON_TYPES):
        raise _Unsure(type(instance).__name__)
    get = schema.get
    ref = get("$ref")
    if ref is not None:
        target = defs.get(ref[len("#/$defs/"):])
        if target is None:
            raise _Unsure(ref)
        if not _valid(instance, target, defs):
            return False
    types = get("type")
    if types is not None:
        names = types if isinstance(types, list) else [types]
        if not any(_is_type(instance, t) for t in names):
            return False
    if "enum" in schema and not any(_equal(instance, e) for e in schema["enum"]):
        return False
    if "const" in schema and not _equal(instance, schema["const"]):
        return False
    if isinstance(instance, dict) and not _valid_object(instance, schema, defs):
        return False
    if isinstance(instance, list):
        if "minItems" in schema and len(instance) < schema["minItems"]:
            return False
        if "maxItems" in schema and len(instance) > schema["maxItems"]:
            return False
        items = get("items")
        if items is not None and not all(_valid(i, items, defs) for i in instance):
            return False
    if isinstance(instance, str):
        if "minLength" in schema and len(instance) < schema["minLength"]:
            return False
        if "pattern" in schema and not re.search(schema["pattern"], instance):
            return False
    if _is_type(instance, "number"):
        if "minimum" in schema and instance < schema["minimum"]:
            return False
        if "maximum" in schema and instance > schema["maximum"]:
            return False
    one_of = get("oneOf")
    if one_of is not None and sum(1 for s in one_of if _valid(instance, s, defs)) != 1:
        return False
    return True


def _valid_object(instance: dict[str, Any], schema: dict[str, Any], defs: dict[str, Any]
                  ) -> bool:
    if not all(isinstance(k, str) for k in instance):
        raise _Unsure("a key that is not a string")
    if any(k not in instance for k in schema.get("required", ())):
        return False
    if "minProperties" in schema and len(instance) < schema["minProperties"]:
        return False
    if "maxProperties" in schema and len(instance) > schema["maxProperties"]:
        return False
    names = schema.get("propertyNames")
    if names is not None and not all(_valid(k, names, defs) for k in instance):
        return False
    properties = schema.get("properties", {})
    for key, sub in properties.items():
        if key in instance and not _valid(instance[key], sub, defs):
            return False
    patterns = schema.get("patternProperties", {})
    for pattern, sub in patterns.items():
        for key, value in instance.items():
            if re.search(pattern, key) and not _valid(value, sub, defs):
                return False
    extra = schema.get("additionalProperties")
    if extra is not None:
        joined = "|".join(patterns)
        for key, value in instance.items():
            if key in properties or (joined and re.search(joined, key)):
                continue
            if not _valid(value, extra, defs):
                return False
    return True
