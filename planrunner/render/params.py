"""Plan params that the program reads as data (resolve/scope.py Constants): one
`struct pr_params` of __u64 members in an array map of one entry, written by the
runtime after loading. A run with another value of such a param (`--set threshold=…`)
then reuses the compiled program and the run cache's entry (run_cache.py): only what
changes the program's shape is compiled.

All members are __u64: a data param is a duration or a non-negative int (its type is
unsigned either way), and the checker casts each name to its type anyway.
"""

from __future__ import annotations

from collections.abc import Sequence

from planrunner.expr.typed import ParamRef
from planrunner.expr.types import UINT64
from planrunner.render.expr_c import c_int_literal
from planrunner.render.names import c_ident

PARAMS_MAP = "pr_params"


def member(name: str) -> str:
    return f"p_{c_ident(name)}"


def c_of_param(ref: ParamRef) -> str:
    """The C of a param used by name: its value when the checker pinned it (compiled
    in), else the read of its member."""
    if ref.name in ref.pins:
        return c_int_literal(ref.value, UINT64)
    return f"PR_PARAM({member(ref.name)})"


def declarations(names: Sequence[str]) -> list[str]:
    """The struct and map of the data params `names` (sorted, as `pack` writes them)."""
    if not names:
        return []
    members = "".join(f"    __u64 {member(n)};\n" for n in names)
    return [f"struct pr_params {{\n{members}}};",
            f"BPF_ARRAY({PARAMS_MAP}, struct pr_params, 1);",
            # bcc rewrites map calls only outside macros: the lookup is a function
            "static __always_inline struct pr_params *pr_params_get(void)\n{\n"
            f"    __u32 k = 0;\n    return {PARAMS_MAP}.lookup(&k);\n}}",
            "#define PR_PARAM(m) "
            "({ struct pr_params *pr_pv = pr_params_get(); pr_pv ? pr_pv->m : 0; })"]
