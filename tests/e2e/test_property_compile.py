"""Property: a mutated plan either fails validation with a PlanError, or renders C that
bcc compiles and the verifier accepts. A compile or verifier error on a plan that
validated is a bug in the validator (or the renderer): the test fails."""

from __future__ import annotations

import json
import re
from pathlib import Path

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from planrunner.errors import PlanError
from planrunner.pipeline import compile_plan

ROOT = Path(__file__).resolve().parents[2]
DEMO = str(ROOT / "tests" / "fixtures" / "elf" / "bin" / "demo")

ATOMS = ["id", "path", "arg1", "arg2", "pid", "tid", "comm", "ts", "cpu", "uid", "0", "1",
         "-3", "0x10", "5ms", '"x"', '"/api"', "true", "str(arg2)", "str(arg2, 8)",
         "str(arg2, id)", "threshold"]
BINARY = ["+", "-", "*", "/", "%", "<<", ">>", "&", "|", "^", "==", "!=", "<", "<=", ">",
          ">=", "&&", "||"]


def expressions() -> st.SearchStrategy[str]:
    leaf = st.sampled_from(ATOMS)

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.tuples(inner, st.sampled_from(BINARY), inner).map(
                lambda t: f"({t[0]} {t[1]} {t[2]})"),
            st.tuples(st.sampled_from(["!", "-", "~"]), inner).map(lambda t: f"{t[0]}{t[1]}"),
            st.tuples(st.sampled_from(["contains", "startswith"]), inner,
                      st.sampled_from(['"a"', '"/api/"', '""'])).map(
                lambda t: f"{t[0]}({t[1]}, {t[2]})"),
        )

    return st.recursive(leaf, extend, max_leaves=6)


def plan_text(where: str, field: str, arg_type: str, size: int) -> str:
    return json.dumps({
        "planrunner": 1, "name": "prop",
        "params": {"threshold": {"type": "duration", "default": "1ms", "help": "t"}},
        "settings": {"string_size": size},
        "targets": {"d": {"binary": DEMO}},
        "probes": {"start": {"usdt": "d:demo:request__start",
                             "args": [{"name": "id", "type": arg_type},
                                      {"name": "path", "type": "string"}],
                             "where": where}},
        "outputs": [{"print": "start", "fields": ["id", {"v": field}]}],
    })


@seed(20261203)
@settings(max_examples=100, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(where=expressions(), field=expressions(),
       arg_type=st.sampled_from(["uint64", "int8", "int32", "pointer", "bool"]),
       size=st.sampled_from([1, 16, 128, 700]))
def test_mutated_plans_validate_or_compile(tmp_path_factory, where, field, arg_type, size):
    from bcc import BPF

    path = tmp_path_factory.mktemp("prop") / "plan.yaml"
    path.write_text(plan_text(where, field, arg_type, size))
    try:
        _plan, _resolved, program = compile_plan(str(path), {})
    except PlanError:
        return
    thunks = re.findall(r"^int (pr_\w+)\(struct pt_regs \*ctx\)$", program.c_source, re.M)
    bpf = BPF(text=program.c_source.encode(),
              cflags=["-Wno-macro-redefined", "-Wno-unused-function"])
    try:
        for fn in thunks:
            assert bpf.load_func(fn.encode(), BPF.KPROBE).fd >= 0
    finally:
        bpf.cleanup()
