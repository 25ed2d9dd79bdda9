"""The table of well-known USDT providers (planrunner/providers.py): the bundled plans
declare its names and types, it agrees with the real binaries of this machine, and
`planrunner new` names and types arguments from it."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import pytest

from planrunner.expr.ast import to_source
from planrunner.plan import load_plan
from planrunner.providers import PROVIDERS, known_args
from planrunner.starter import to_toml, to_yaml, usdt_starter
from planrunner.usdt.probes import read_probes

ROOT = Path(__file__).resolve().parents[2]
PLANS = sorted((ROOT / "plans").glob("*.yaml"))
SIZES = {"string": 8, "pointer": 8, "bool": 1, "int8": 1, "uint8": 1, "int16": 2,
         "uint16": 2, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8}
# The builds of this Debian the table was checked against (`planrunner list -vv`).
BINARIES = ["/usr/bin/python3.11", "/usr/lib/x86_64-linux-gnu/libruby-3.1.so.3.1",
            "/usr/bin/php8.2", "/usr/lib/postgresql/15/bin/postgres",
            *glob.glob("/usr/lib/jvm/java-17-openjdk-*/lib/server/libjvm.so")[:1],
            "/usr/sbin/mariadbd", "/usr/sbin/mysqld"]


def _declared(plan: Path) -> list[tuple[str, str, int, tuple[object, ...]]]:
    """(provider, probe, index, (name, type, length)) of each argument `plan` declares
    for a usdt probe."""
    out = []
    for probe in load_plan(str(plan), {}).probes:
        if probe.kind == "usdt":
            out += [(probe.provider or "", probe.probe or "", arg.index,
                     (arg.name, arg.type,
                      to_source(arg.length) if arg.length is not None else None))
                    for arg in probe.args]
    return out


@pytest.mark.parametrize("plan", PLANS, ids=[p.stem for p in PLANS])
def test_bundled_plans_declare_the_tables_names_and_types(plan: Path) -> None:
    """Every argument a bundled plan declares for a known provider's probe has the
    table's name, type and string length: one vocabulary for `new` and the library."""
    for provider, probe, index, got in _declared(plan):
        if provider not in PROVIDERS:
            continue
        table = PROVIDERS[provider].get(probe)
        assert table is not None, f"{plan.name}: {provider}:{probe} is not in the table"
        known = table[index - 1]
        assert got == (known.name, known.type, known.length), \
            f"{plan.name}: {provider}:{probe} argument {index}"


def test_the_bundled_plans_use_every_known_provider() -> None:
    """The check above is not empty: each provider of the table has a bundled plan that
    declares arguments of it."""
    used = {provider for plan in PLANS for provider, *_ in _declared(plan)}
    assert set(PROVIDERS) <= used, set(PROVIDERS) - used


@pytest.mark.parametrize("binary", BINARIES)
def test_the_table_agrees_with_the_probes_of_this_machines_builds(binary: str) -> None:
    """Each probe of a known provider in the binary is in the table, with as many
    arguments as its note has operands, each typed for the operand's size."""
    if not os.path.exists(binary):
        pytest.skip(f"{binary} is not installed here")
    probes = [p for p in read_probes(binary) if p.provider in PROVIDERS]
    if not probes:
        pytest.skip(f"{binary} has no USDT probe of a known provider (built without them)")
    for probe in probes:
        args = PROVIDERS[probe.provider].get(probe.name)
        assert args is not None, f"{probe.provider}:{probe.name} is not in the table"
        operands = probe.sites[0].args
        assert len(args) == len(operands), f"{probe.provider}:{probe.name}"
        for arg, op in zip(args, operands, strict=True):
            if arg.type is not None:
                assert SIZES[arg.type] == op.size, (probe.provider, probe.name, arg.name)


def test_known_args_only_for_the_same_number_of_operands() -> None:
    assert [a.name for a in known_args("python", "function__return", 3) or ()] == \
        ["file", "func", "line"]
    assert known_args("python", "function__return", 4) is None  # another version
    assert known_args("demo", "request__start", 2) is None


def test_new_names_and_types_the_arguments_of_a_known_provider() -> None:
    """`function__return: file, func, line`, strings as strings (it wrote three
    pointers and an int32, unnamed)."""
    python = "/usr/bin/python3.11"
    if not os.path.exists(python):
        pytest.skip(f"{python} is not installed here")
    probes = [p for p in read_probes(python) if p.name == "function__return"]
    plan = usdt_starter("planrunner new python3.11 function__return", python, python,
                        probes, 1)
    yaml = to_yaml(plan)
    assert "- {name: file, type: string}" in yaml
    assert "- {name: func, type: string}" in yaml
    assert "- {name: line, type: int32}" in yaml
    assert "fields: [file, func, line]" in yaml
    assert '{ name = "file", type = "string" },' in to_toml(plan)


def test_new_gives_a_hotspot_string_its_length_and_leaves_the_length_out_of_fields(
        ) -> None:
    jvm = next(iter(glob.glob("/usr/lib/jvm/java-17-openjdk-*/lib/server/libjvm.so")), None)
    if jvm is None:
        pytest.skip("no OpenJDK 17 libjvm.so here")
    probes = [p for p in read_probes(jvm) if p.name == "thread__start"]
    yaml = to_yaml(usdt_starter("planrunner new libjvm.so thread__start", jvm, jvm,
                                probes, 1))
    assert "- {name: name, type: string, length: arg2}" in yaml
    assert "- {name: daemon, type: bool}" in yaml
    assert "fields: [name, java_tid, native_tid, daemon]" in yaml
