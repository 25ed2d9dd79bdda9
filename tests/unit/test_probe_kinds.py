"""The probe-kind table (planrunner/probe_kinds.py) is the one place that names the kinds:

- no module but probe_kinds.py compares anything with a kind's name (`kind == "usdt"`,
  `kind in ("uprobe", "uretprobe")`, a tuple of names bound to a constant and tested
  later, a `match` on names, `what.startswith("uretprobe")`) nor keys a table by names:
  each stage asks the descriptor (`kind(spec.kind).returns`) or looks its own table up
  by it (read off the source with `ast`; two uses of the same words that are not kinds
  are listed in NOT_KINDS);
- every stage table has a row for every kind it serves;
- the plan schema's kinds, the models' `Literal`s and the descriptors agree.
Each rule is a function of the source or of a table, also run on planted violations
that must make it fail."""

from __future__ import annotations

import ast
import json
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, get_args

import pytest

from planrunner import probe_kinds as pk
from planrunner.commands.validate import SUMMARIES
from planrunner.plan.build_probes import PARSERS
from planrunner.plan.model import ProbeKind
from planrunner.render.model import RenderedProgram
from planrunner.render.names import THUNK_SUFFIXES
from planrunner.render.thunks import THUNK_READS, THUNK_SHAPES
from planrunner.resolve import SITE_MAKERS
from planrunner.resolve.locate import LOCATORS
from planrunner.runtime.attach import STRATEGIES

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "planrunner"
WORDS = frozenset(pk.KIND_NAMES) | {s.name for s in pk.SITE_KINDS}
# (module, word): the same word meaning something else than a probe kind
NOT_KINDS = {
    # PLANRUNNER_ATTACH=perf: attach uprobes as perf events (a strategy, not a kind)
    ("planrunner.runtime.features", "perf"),
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def kind_name_uses(text: str) -> Iterator[tuple[int, str, str]]:
    """(line, kind name, code) of every comparison with a kind's name in `text`, every
    `case` of one, every dict display keyed by one and every text tested for starting
    (or ending) with one; a name is also compared through
    a collection of names, or a variable bound to one (`SAMPLING = ("profile", ...)`,
    then `k in SAMPLING`)."""
    tree = ast.parse(text)
    bound: dict[str, set[str]] = {}  # variable -> the kind names its value holds

    def words(node: ast.AST | None) -> set[str]:
        if isinstance(node, ast.Constant):
            return {node.value} & WORDS if isinstance(node.value, str) else set()
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return set().union(*(words(e) for e in node.elts))
        if isinstance(node, ast.Starred):
            return words(node.value)
        if isinstance(node, ast.Name):
            return bound.get(node.id, set())
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("frozenset", "set", "tuple") and node.args:
            return words(node.args[0])
        return set()

    for _ in range(3):  # names bound to names bound to names
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name) and words(node.value):
                        bound[target.id] = words(node.value)
    for node in ast.walk(tree):
        found: set[str] = set()
        if isinstance(node, ast.Compare):
            found = set().union(*(words(o) for o in (node.left, *node.comparators)))
        elif isinstance(node, ast.MatchValue):
            found = words(node.value)
        elif isinstance(node, ast.Dict):
            found = set().union(*(words(k) for k in node.keys))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("startswith", "endswith"):
            found = set().union(*(words(a) for a in node.args))  # a kind named in text
        for word in sorted(found):
            yield node.lineno, word, ast.unparse(node)[:100]


def violations(module: str, text: str) -> list[str]:
    return [f"{module}:{line}: {code}" for line, word, code in kind_name_uses(text)
            if (module, word) not in NOT_KINDS]


SOURCES = {module_name(p): p.read_text(encoding="utf-8")
           for p in sorted(PKG.rglob("*.py")) if p.name != "probe_kinds.py"}


def test_the_sources_were_found() -> None:
    assert "planrunner.resolve" in SOURCES and "planrunner.render.program" in SOURCES
    assert "planrunner.probe_kinds" not in SOURCES


@pytest.mark.parametrize("module", sorted(SOURCES))
def test_no_module_compares_a_kind_with_its_name(module: str) -> None:
    bad = violations(module, SOURCES[module])
    assert not bad, ("ask the kind's descriptor (planrunner/probe_kinds.py) or key a "
                     "table by it: " + "; ".join(bad))


def test_the_words_that_are_not_kinds_are_still_used_so() -> None:
    """An exemption whose use is gone would let a real kind comparison through."""
    for module, word in NOT_KINDS:
        assert word in {w for _l, w, _c in kind_name_uses(SOURCES[module])}, (module, word)


@pytest.mark.parametrize("code", [
    'if spec.kind == "usdt":\n    pass',
    'ret = site.kind != "uretprobe"',
    'fn = k in ("uprobe", "uretprobe")',
    'if "tracepoint" == probe.spec.kind:\n    pass',
    'SAMPLING = ("profile", "interval")\nok = kind not in SAMPLING',
    'S = ("profile",)\nT = (*S, "x")\nok = k in T',
    'S = frozenset({"span"})\nok = k in S',
    'ok = k in (*OTHER, "perf")',
    'match spec.kind:\n    case "span":\n        pass',
    'PARSE = {"usdt": f, "tracepoint": g}',
    'ok = kinds.get(ref) == "span"',
    'ok = scope.what.startswith("uretprobe")',
])
def test_a_planted_comparison_is_found(code: str) -> None:
    assert violations("planrunner.resolve.planted", textwrap.dedent(code))


@pytest.mark.parametrize("code", [
    'ok = out.spec.kind == "print"',
    'site = AttachSite("tracepoint", "pr_on_exit", "(planrunner)", 0)',
    'k = kind("usdt")',
    'ok = k.returns and k is not None',
    'ok = typ.kind == "user"',
    'ok = text.startswith("tracepoint:")',
])
def test_what_is_no_comparison_of_a_kind_name_passes(code: str) -> None:
    assert not violations("planrunner.resolve.planted", code)


def test_an_exemption_is_for_its_module_only() -> None:
    code = 'multi = os.environ.get("X", "") != "perf"'
    assert not violations("planrunner.runtime.features", code)
    assert violations("planrunner.runtime.session", code)


# --- every table has every kind ----------------------------------------------------------

def missing_rows(table: Mapping[object, object], expected: set[object]) -> set[object]:
    """The rows `table` lacks (or has beyond `expected`), by name."""
    return {getattr(k, "name", k) for k in set(table) ^ expected}


WITH_SITES = {k for k in pk.KINDS if not k.pairs}


@pytest.mark.parametrize(("name", "table", "expected"), [
    ("plan/build_probes.py PARSERS", PARSERS, set(pk.KINDS)),
    ("commands/validate.py SUMMARIES", SUMMARIES, set(pk.KINDS)),
    ("resolve/locate.py LOCATORS", LOCATORS, WITH_SITES),
    ("resolve/__init__.py SITE_MAKERS", SITE_MAKERS, WITH_SITES),
    ("render/names.py THUNK_SUFFIXES", THUNK_SUFFIXES, set(pk.PLAN_SITE_KINDS)),
    ("render/thunks.py THUNK_SHAPES", THUNK_SHAPES, set(pk.PLAN_SITE_KINDS)),
    ("render/thunks.py THUNK_READS", THUNK_READS, set(pk.PLAN_SITE_KINDS)),
    ("runtime/attach.py STRATEGIES", STRATEGIES, {s.strategy for s in pk.SITE_KINDS}),
])
def test_every_table_has_a_row_per_kind(name: str, table: Mapping[object, object],
                                        expected: set[object]) -> None:
    assert not missing_rows(table, expected), f"{name}: {missing_rows(table, expected)}"


def test_a_missing_row_is_found() -> None:
    partial = {k: v for k, v in PARSERS.items() if k is not pk.INTERVAL}
    assert missing_rows(partial, set(pk.KINDS)) == {"interval"}
    assert missing_rows({**LOCATORS, pk.SPAN: None}, WITH_SITES) == {"span"}


def test_a_kind_has_sites_unless_it_pairs_others() -> None:
    for k in pk.KINDS:
        assert (k.site is None) == k.pairs, k.name
        assert k.site is None or k.site in pk.PLAN_SITE_KINDS, k.name


def test_lookups_give_the_descriptors() -> None:
    assert all(pk.kind(k.name) is k for k in pk.KINDS)
    assert all(pk.site_kind(s.name) is s for s in pk.SITE_KINDS)
    assert pk.find({"uretprobe": "app:f", "args": []}) == (pk.URETPROBE,)
    assert pk.find({"span": {}, "usdt": "a:b"}) == (pk.USDT, pk.SPAN)
    assert pk.find({"where": "x"}) == ()
    with pytest.raises(KeyError):
        pk.kind("kprobe")


# --- the schema, the models and the descriptors agree ------------------------------------

def schema_kinds(schema: dict[str, Any]) -> tuple[str, ...]:
    """The probe kinds the plan schema offers: `probe`'s oneOf, one required key each."""
    probe = schema["$defs"]["probe"]
    return tuple(one["required"][0] for one in probe["oneOf"])


def test_the_schema_offers_the_kinds_of_the_table_in_its_order() -> None:
    schema = json.loads((ROOT / "schema" / "plan.schema.json").read_text(encoding="utf-8"))
    assert schema_kinds(schema) == pk.KIND_NAMES
    properties = schema["$defs"]["probe"]["properties"]
    assert all(name in properties for name in pk.KIND_NAMES)


def test_a_kind_the_schema_lacks_is_found() -> None:
    schema = {"$defs": {"probe": {"oneOf": [{"required": [n]} for n in pk.KIND_NAMES[:-1]]}}}
    assert schema_kinds(schema) != pk.KIND_NAMES


def test_the_models_literals_are_the_table_names() -> None:
    assert get_args(ProbeKind) == pk.KIND_NAMES
    assert get_args(pk.SiteKindName) == tuple(s.name for s in pk.SITE_KINDS)


# --- the run's own programs: raw tracepoints unless the plan shares their event ---------

def _with_tracepoints(*events: tuple[str, str]) -> RenderedProgram:
    """A rendered program whose plan has a tracepoint on each (category, event)."""
    from planrunner.render.model import AttachSite

    sites = tuple(AttachSite("tracepoint", f"pr_t_{i}", "t", 0, category=c, event=e)
                  for i, (c, e) in enumerate(events))
    return RenderedProgram("", sites, (), (), "p")


def test_own_exit_and_exec_are_raw_tracepoints_unless_the_plan_has_their_event() -> None:
    """A raw tracepoint's close waits for no grace period; but where the plan has a
    tracepoint on the same event, ours stays a perf event so that it runs first."""
    from planrunner.render.model import (
        EXEC_SITE,
        EXIT_SITE,
        FORK_SITE,
        OWN_RAW_VARIANTS,
    )
    from planrunner.runtime.scope import own_sites

    plain = own_sites(_with_tracepoints(), follow_children=False, btf=False)
    assert OWN_RAW_VARIANTS[EXIT_SITE] in plain and OWN_RAW_VARIANTS[EXEC_SITE] in plain
    assert EXIT_SITE not in plain and EXEC_SITE not in plain and FORK_SITE not in plain
    assert {pk.site_kind(s.kind) for s in OWN_RAW_VARIANTS.values()} == \
        {pk.RAW_TRACEPOINT_SITE}
    shared = own_sites(_with_tracepoints(("sched", "sched_process_exec")), follow_children=True,
                       btf=False)
    assert EXEC_SITE in shared and OWN_RAW_VARIANTS[EXIT_SITE] in shared
    assert FORK_SITE in shared and len(shared) == len(plain) + 1


def test_with_the_kernels_offsets_no_own_program_is_a_perf_event_unless_shared() -> None:
    """With the kernel's BTF, fork is a raw tracepoint too and exec reads argv itself:
    the execve syscall programs (perf events) are not attached at all. A plan's
    tracepoint on an event still keeps ours there a perf event."""
    from planrunner.render.model import (
        EXECVE_SITES,
        EXIT_SITE,
        FORK_SITE,
        OWN_BTF_VARIANTS,
        OWN_RAW_VARIANTS,
        PLANRUNNER_SITES,
    )
    from planrunner.runtime.scope import own_sites

    plain = own_sites(_with_tracepoints(), follow_children=True, btf=True)
    assert [s.fn_name for s in plain] == [
        "pr_on_exit_raw", "pr_on_fork_raw", "pr_on_exec_argv_raw", "pr_scope_fork_raw"]
    assert {pk.site_kind(s.kind) for s in plain} == {pk.RAW_TRACEPOINT_SITE}
    assert not set(EXECVE_SITES) & set(plain)
    fork, exec_ = PLANRUNNER_SITES[0], PLANRUNNER_SITES[-1]
    shared = own_sites(_with_tracepoints(("task", "task_newtask"), ("sched", "sched_process_exec"),
                               ("syscalls", "sys_enter_execve")),
                       follow_children=True, btf=True)
    assert shared == [OWN_RAW_VARIANTS[EXIT_SITE], fork, OWN_BTF_VARIANTS[exec_][0],
                      FORK_SITE]
    assert [s.fn_name for s in shared] == [
        "pr_on_exit_raw", "pr_on_fork", "pr_on_exec_argv", "pr_scope_fork"]
    # every variant shares its event with the program it stands for
    for site, pair in OWN_BTF_VARIANTS.items():
        assert {(v.category, v.event) for v in pair} == {(site.category, site.event)}
