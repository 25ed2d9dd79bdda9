"""Check a LoadedPlan against schema/plan.schema.json; errors become located Diagnostics.

`Draft202012Validator.iter_errors` gives errors with a JSON path into the data; the
SourceMap turns that path into a Span: the key's span for an unknown key (with
did-you-mean among the allowed keys), the value's span for a wrong value. We aim at
one message per real mistake: the oneOf that says "exactly one kind" becomes a single
sentence naming the kinds (none, or the two given), other oneOf/anyOf errors are
reduced with `best_match`, and a "missing key" that a misspelt key explains is
dropped. Diagnostics are sorted by position.

jsonschema is imported only when plan/schema_quick.py does not vouch for the plan (a
plan with a mistake, or a schema keyword it does not know): its import is ~75 ms.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from planrunner.diagnostics import Diagnostic, Span, did_you_mean
from planrunner.errors import PlanSchemaError
from planrunner.kernel_probes import KINDS as KERNEL_KINDS
from planrunner.plan.schema_quick import conforms
from planrunner.plan.source import JsonPath, LoadedPlan, describe
from planrunner.probe_kinds import KIND_NAMES, KINDS
from planrunner.resources import data_dir

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

SCHEMA_FILE = "plan.schema.json"
# jsonschema's ValidationError. Its stubs type `schema`, `instance` and `validator_value`
# as unions with `Unset` (errors built by hand may lack them); every error here comes
# from iter_errors on our own schema, where all are set, so they are read as they are.
SchemaError = Any
# what a `kprobe:` in a probe stands in for: the kinds that probe an event (not a timer)
PROBE_KINDS = tuple(k.name for k in KINDS if not k.samples)
_PROBE_KIND_KEYS = KIND_NAMES


@functools.cache
def load_schema() -> dict[str, Any]:
    """The plan schema (a dict), read once from the `schema` data folder."""
    with open(data_dir("schema") / SCHEMA_FILE, encoding="utf-8") as fh:
        schema: dict[str, Any] = json.load(fh)
    return schema


@functools.cache
def _validator() -> Draft202012Validator:
    from jsonschema import Draft202012Validator  # lazily: see the module docstring

    return Draft202012Validator(load_schema())


def _kind(value: object) -> str:
    if value is None:
        return "an empty value"
    if isinstance(value, bool):
        return "a boolean"
    names = {str: "a string", int: "an integer", float: "a number", list: "a list",
             dict: "a mapping"}
    return names.get(type(value), f"a {type(value).__name__}")


def _show(value: object) -> str:
    if isinstance(value, str):
        return f"'{value if len(value) <= 40 else value[:37] + '...'}'"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return _kind(value)


_EXPECTED = {"string": "a string", "integer": "an integer", "number": "a number",
             "boolean": "true or false", "object": "a mapping", "array": "a list",
             "null": "empty"}


def _what(jpath: JsonPath) -> str:
    return "the plan" if not jpath else describe(jpath)


class _Translator:
    """Turns one ValidationError into Diagnostics (see the module docstring)."""

    def __init__(self, loaded: LoadedPlan) -> None:
        self.spans = loaded.spans
        self.suggested: dict[JsonPath, set[str]] = {}
        # id(diagnostic) -> (object path, keys it says are missing), to drop the ones a
        # misspelt key explains ("unknown key 'binar'" makes "missing 'binary'" noise).
        self.missing: dict[int, tuple[JsonPath, tuple[str, ...]]] = {}

    def _tag(self, diag: Diagnostic, jpath: JsonPath, *keys: str) -> Diagnostic:
        self.missing[id(diag)] = (jpath, keys)
        return diag

    def explained(self, diag: Diagnostic) -> bool:
        tag = self.missing.get(id(diag))
        if tag is None:
            return False
        jpath, keys = tag
        return bool(self.suggested.get(jpath, set()) & set(keys))

    def translate(self, err: SchemaError) -> list[Diagnostic]:
        jpath: JsonPath = tuple(err.absolute_path)
        handler = getattr(self, f"_{err.validator}", None)
        if handler is not None:
            diags: list[Diagnostic] = handler(err, jpath)
            return diags
        return [Diagnostic(f"{_what(jpath)}: {err.message}", self.spans.value(jpath))]

    def _hint_for(self, err: SchemaError) -> tuple[str, ...]:
        desc = err.schema.get("description") if isinstance(err.schema, dict) else None
        return (desc,) if desc else ()

    def _additionalProperties(self, err: SchemaError, jpath: JsonPath) -> list[Diagnostic]:
        allowed = sorted(err.schema.get("properties", {}))
        patterns = list(err.schema.get("patternProperties", {}))
        out = []
        for key in err.instance:
            if key in allowed or any(re.search(p, str(key)) for p in patterns):
                continue
            if len(jpath) == 2 and jpath[0] == "probes" and key in KERNEL_KINDS:
                out.append(self._kernel_function(jpath, str(key)))
                continue
            where = "top-level key" if not jpath else "key"
            suffix = "" if not jpath else f" in {describe(jpath)}"
            guess = did_you_mean(str(key), allowed)
            if guess:
                self.suggested.setdefault(jpath, set()).add(guess)
                hint = f"did you mean '{guess}'?"
            else:
                hint = f"allowed keys: {', '.join(allowed)}"
            out.append(Diagnostic(f"unknown {where} '{key}'{suffix}",
                                  self.spans.key(jpath + (key,)), (hint,)))
        return out

    def _kernel_function(self, jpath: JsonPath, kind: str) -> Diagnostic:
        """`kprobe:` in a probe: not offered, and why (not "did you mean 'uprobe'?")."""
        from planrunner.kernel_probes import kernel_function_message

        # The probe then has no kind of ours: this diagnostic says all there is to say.
        self.suggested.setdefault(jpath, set()).update(PROBE_KINDS)
        message, hints = kernel_function_message(kind)
        return Diagnostic(message, self.spans.key(jpath + (kind,)), hints)

    def _required(self, err: SchemaError, jpath: JsonPath) -> list[Diagnostic]:
        props = err.schema.get("properties", {})
        out = []
        for key in err.validator_value:
            if key in err.instance:
                continue
            desc = props.get(key, {}).get("description")
            hints = (f"'{key}': {desc}",) if desc else ()
            if not jpath:
                out.append(Diagnostic(f"the plan has no '{key}' section", self.spans.value(()),
                                      hints))
            else:
                out.append(Diagnostic(f"{describe(jpath)} is missing '{key}'",
                                      self.spans.key(jpath), hints))
            out[-1] = self._tag(out[-1], jpath, key)
        return out

    def _oneOf(self, err: SchemaError, jpath: JsonPath) -> list[Diagnostic]:
        branches = err.validator_value
        kinds = [b["required"][0] for b in branches
                 if set(b) == {"required"} and len(b["required"]) == 1]
        if len(kinds) != len(branches) or not isinstance(err.instance, dict):
            from jsonschema.exceptions import best_match  # only once jsonschema ran

            best = best_match(err.context)
            return self.translate(best) if best is not None else []
        present = [k for k in kinds if k in err.instance]
        what = describe(jpath)
        noun = "a probe" if jpath[:1] == ("probes",) else "an output"
        if not present:
            diag = Diagnostic(f"{what} needs exactly one of {', '.join(kinds)}",
                              self.spans.key(jpath), (self._kind_example(jpath),))
            return [self._tag(diag, jpath, *kinds)]
        quoted = [f"'{k}'" for k in present]
        named = f"{', '.join(quoted[:-1])} and {quoted[-1]}"
        return [Diagnostic(f"{what} has {'both ' if len(present) == 2 else ''}{named}; "
                           f"{noun} has exactly one kind",
                           self.spans.key(jpath + (present[1],)),
                           (f"split it into {len(present)} entries, one kind each",))]

    @staticmethod
    def _kind_example(jpath: JsonPath) -> str:
        if jpath[:1] == ("probes",):
            return "for example: usdt: TARGET:PROVIDER:NAME, or span: {begin: A, end: B}"
        return "for example: print: PROBE, or count: PROBE with by: [...]"

    _anyOf = _oneOf

    def _type(self, err: SchemaError, jpath: JsonPath) -> list[Diagnostic]:
        types = err.validator_value if isinstance(err.validator_value, list) else [
            err.validator_value]
        expected = " or ".join(_EXPECTED.get(str(t), str(t)) for t in types)
        got = _kind(err.instance)
        if isinstance(err.instance, str | int | float) and err.instance is not None:
            got += f" ({_show(err.instance)})"
        return [Diagnostic(f"{_what(jpath)} must be {expected}, got {got}",
                           self.spans.value(jpath), self._hint_for(err))]

    def _const(self, err: SchemaError, jpath: JsonPath) -> list[Diagnostic]:
        msg = f"{_what(jpath)} must be {json.dumps(err.validator_value)}"
        if jpath == ("planrunner",):
            msg += " (the plan format version)"
        return [Diagnostic(f"{msg}, got {_show(err.instance)}", self.spans.value(jpath))]

    def _enum(self, err: SchemaError, jpath: JsonPath) -> list[Diagnostic]:
        options = [str(v) for v in err.validator_value]
        guess = did_you_mean(str(err.instance), options)
        hints = (f"did you mean '{guess}'?",) if guess else ()
        return [Diagnostic(f"{_what(jpath)} must be one of {', '.join(options)}; "
                           f"got {_show(err.instance)}", self.spans.value(jpath), hints)]

    def _bound(self, err: SchemaError, jpath: JsonPath, word: str) -> list[Diagnostic]:
        return [Diagnostic(f"{_what(jpath)} must be {word} {err.validator_value}, "
                           f"got {_show(err.instance)}", self.spans.value(jpath),
                           self._hint_for(err))]

    def _minimum(self, err: SchemaError, jpath: JsonPath) -> list[Diagnostic]:
        return self._bound(err, jpath, "at least")

    def _maximum(self, err: SchemaError, jpath: JsonPath) -> list[Diagnostic]:
        return self._bound(err, jpath, "at most")

    def _minLength(self, err: SchemaError, jpath: JsonPath) -> list[Diagnostic]:
        return [Diagnostic(f"{_what(jpath)} must not be empty", self.spans.value(jpath))]

    def _minItems(self, err: SchemaError, jpath: JsonPath) -> list[Diagnostic]:
        return [Diagnostic(f"{_what(jpath)} must list at least one entry",
                           self.spans.value(jpath), self._hint_for(err))]

    def _maxItems(self, err: SchemaError, jpath: JsonPath) -> list[Diagnostic]:
        return [Diagnostic(f"{_what(jpath)} has {len(err.instance)} entries; at most "
                           f"{err.validator_value} are allowed", self.spans.value(jpath))]

    def _minProperties(self, err: SchemaError, jpath: JsonPath) -> list[Diagnostic]:
        if jpath == ("probes",):
            return [Diagnostic("'probes' must define at least one probe", self.spans.key(jpath))]
        return self._one_key(err, jpath)

    def _maxProperties(self, err: SchemaError, jpath: JsonPath) -> list[Diagnostic]:
        return self._one_key(err, jpath)

    def _one_key(self, err: SchemaError, jpath: JsonPath) -> list[Diagnostic]:
        n = len(err.instance)
        return [Diagnostic(f"{_what(jpath)} must be a one-key mapping {{NAME: EXPRESSION}}, "
                           f"got {n} key{'s' if n != 1 else ''}", self.spans.value(jpath),
                           ("write one mapping per computed field: [{a: EXPR1}, {b: EXPR2}]",))]

    def _propertyNames(self, err: SchemaError, jpath: JsonPath) -> list[Diagnostic]:
        name = err.instance
        inner = f" in {describe(jpath)}" if jpath else ""
        return [Diagnostic(f"'{name}' is not a valid name{inner}", self.spans.key(jpath + (name,)),
                           ("use letters, digits and '_', not starting with a digit",))]

    def _pattern(self, err: SchemaError, jpath: JsonPath) -> list[Diagnostic]:
        if "propertyNames" in err.schema_path:  # a bad key: the error is about the name
            return self._propertyNames(err, jpath)
        return [Diagnostic(f"{_what(jpath)} {_show(err.instance)} does not match "
                           f"{err.validator_value}", self.spans.value(jpath))]


def _position(diag: Diagnostic) -> tuple[int, int, str]:
    span = diag.span or Span("", 0, 0)
    return (span.line, span.column, diag.message)


@dataclass(frozen=True)
class SchemaReport:
    """The schema's verdict on a plan: its diagnostics, and which parts they break.

    `broken` holds the JSON paths of the entries that cannot be built (a probe, a
    target, a param, an output by index, or a whole section such as ('settings',));
    `unknown_keys` the paths of unknown keys, which the build simply leaves out.
    Everything else passed the schema and can be checked semantically (build.py).
    """

    diagnostics: list[Diagnostic]
    broken: frozenset[JsonPath] = frozenset()
    unknown_keys: frozenset[JsonPath] = frozenset()


# Sections whose entries are built one by one: an error inside one entry breaks that
# entry only. Any other top-level key is broken as a whole.
_ENTRY_SECTIONS = ("params", "targets", "probes", "outputs")


def _broken_part(jpath: JsonPath) -> JsonPath | None:
    """The part of the plan an error at `jpath` makes unbuildable (None: nothing)."""
    if not jpath:
        return None  # a missing section or an unknown top-level key: the rest stands
    if jpath[0] in _ENTRY_SECTIONS and len(jpath) >= 2:
        return jpath[:2]
    return jpath[:1]


def _dedented_probe_fields(loaded: LoadedPlan) -> dict[str, str | None]:
    """Entries of `probes:` named like a probe's field (`args`, `where`, ...) that are
    no probe (no kind): a field indented one level too little, so it left its probe.
    Each maps to the probe above it (None: it is first)."""
    probes = loaded.data.get("probes") if isinstance(loaded.data, dict) else None
    if not isinstance(probes, dict):
        return {}
    fields = set(load_schema()["$defs"]["probe"]["properties"]) - set(_PROBE_KIND_KEYS)
    out: dict[str, str | None] = {}
    above: str | None = None
    for name, value in probes.items():
        if name in fields and not (isinstance(value, dict)
                                   and set(value) & set(_PROBE_KIND_KEYS)):
            out[str(name)] = above
        else:
            above = str(name)
    return out


def _dedented(loaded: LoadedPlan, field: str, owner: str | None) -> Diagnostic:
    where = f"probe '{owner}'" if owner is not None else "its probe"
    if loaded.format == "toml":
        table = f"[probes.{owner}]" if owner is not None else "[probes.NAME]"
        return Diagnostic(
            f"'{field}' is a field of a probe, but it is written as a probe of its own",
            loaded.spans.key(("probes", field)), (f"move it into the table {table}",))
    return Diagnostic(
        f"'{field}' is a field of a probe, but it is written as a probe of its own: "
        f"probably an indentation mistake", loaded.spans.key(("probes", field)),
        (f"indent `{field}:` one level more, under {where}, like its kind "
         "(`usdt:`, `uprobe:`, ...)",))


def schema_report(loaded: LoadedPlan) -> SchemaReport:
    """Every schema mistake in `loaded` (one Diagnostic each, sorted by position) and
    the parts of the plan they break."""
    if conforms(loaded.data, load_schema()):  # no mistake: jsonschema is not needed
        return SchemaReport([])
    translator = _Translator(loaded)
    diags: list[Diagnostic] = []
    broken: set[JsonPath] = set()
    unknown: set[JsonPath] = set()
    dedented = _dedented_probe_fields(loaded)
    for field, owner in dedented.items():
        diags.append(_dedented(loaded, field, owner))
        broken.add(("probes", field))
        if owner is not None:  # built without its field, it would only add cascades
            broken.add(("probes", owner))
    for err in _validator().iter_errors(loaded.data):
        jpath: JsonPath = tuple(err.absolute_path)
        if jpath[:1] == ("probes",) and len(jpath) >= 2 and jpath[1] in dedented:
            continue  # said once, above
        diags.extend(translator.translate(err))
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            allowed = err.schema.get("properties", {})
            patterns = list(err.schema.get("patternProperties", {}))
            unknown.update(jpath + (k,) for k in err.instance if k not in allowed
                           and not any(re.search(p, str(k)) for p in patterns))
            continue
        if "propertyNames" in err.schema_path:  # a bad name breaks its entry only
            jpath = jpath + (err.instance,)
        part = _broken_part(jpath)
        if part is not None:
            broken.add(part)
    kept = [d for d in diags if not translator.explained(d)]
    unique = list(dict.fromkeys(kept))
    return SchemaReport(sorted(unique, key=_position), frozenset(broken), frozenset(unknown))


def schema_diagnostics(loaded: LoadedPlan) -> list[Diagnostic]:
    """Every schema mistake in `loaded`, one Diagnostic each, sorted by position."""
    return schema_report(loaded).diagnostics


def validate(loaded: LoadedPlan) -> None:
    """Raise PlanSchemaError listing every schema mistake; return None when valid."""
    if conforms(loaded.data, load_schema()):  # no mistake: jsonschema is not needed
        return
    diags = schema_diagnostics(loaded)
    if diags:
        raise PlanSchemaError(diags)
