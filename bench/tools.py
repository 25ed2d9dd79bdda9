"""The tools bench/run.py compares, as argv templates, and the plans planrunner runs.

Placeholders: {bin} (the workload build), {pid} (its PID), {plan} / {count_plan} (the
plans written for {bin}), {out} unused here (stdout goes to a file the phase chooses).
Each Tool says how it reports being attached (`ready`: a regex over stdout or stderr
lines) and, for counting tools, where its count is (`count_re`).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PLANRUNNER = str(ROOT / ".venv" / "bin" / "planrunner")
PY = "/usr/bin/python3"
JVM = "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so"

PRINT_PLAN = """planrunner: 1
name: bench-print
targets: {{w: {{binary: "{bin}"}}}}
probes:
  tick:
    usdt: w:bench:tick
    args: [{{name: counter, type: int64}}, {{name: word, type: string}}, {{name: len, type: int32}}]
outputs:
  - print: tick
    fields: [counter, word, len]
"""

COUNT_PLAN = """planrunner: 1
name: bench-count
targets: {{w: {{binary: "{bin}"}}}}
probes: {{tick: {{usdt: "w:bench:tick"}}}}
outputs:
  - count: tick
"""

VALIDATE_PLAN = """planrunner: 1
name: bench-validate
targets: {{jvm: {{binary: "{jvm}"}}}}
probes:
  loaded:
    usdt: jvm:hotspot:class__loaded
    args: [{{name: name, type: string, length: arg2}}]
  gc: {{usdt: "jvm:hotspot:gc__begin"}}
outputs:
  - print: loaded
    fields: [pid, name]
  - count: gc
"""


@dataclass(frozen=True)
class Tool:
    name: str
    argv: tuple[str, ...]
    kind: str  # floor | print | count
    ready: str  # regex on a line of stdout/stderr once attached
    count_re: str | None = None

    def command(self, subst: dict[str, str]) -> list[str]:
        out = []
        for token in self.argv:
            for key, value in subst.items():
                token = token.replace("{" + key + "}", value)
            out.append(token)
        return out

    def count(self, out: bytes) -> int | None:
        if self.count_re is None:
            return None
        found = re.findall(self.count_re.encode(), out, re.M)
        return sum(int(x) for x in found) if found else None


TRACE_FMT = 'u:{bin}:bench:tick "%d %s %d", arg1, arg2, arg3'
BT_PRINTF = 'usdt:{bin}:bench:tick { printf("%d %s %d\\n", arg0, str(arg1), arg2); }'
PR_READY = r"^Tracing "

TOOLS = {t.name: t for t in [
    Tool("floor", (PY, str(HERE / "floor.py"), "{bin}", "{pid}"), "floor", r"^READY"),
    Tool("planrunner", (PLANRUNNER, "run", "{plan}", "--pid", "{pid}"), "print", PR_READY),
    Tool("planrunner-json", (PLANRUNNER, "run", "{plan}", "--pid", "{pid}", "-f", "json"),
         "print", PR_READY),
    Tool("planrunner-count", (PLANRUNNER, "run", "{count_plan}", "--pid", "{pid}", "-f",
                              "json"), "count", PR_READY, r'"count":(\d+)'),
    Tool("trace-bpfcc", ("trace-bpfcc", "-p", "{pid}", TRACE_FMT), "print", r"^PID\s+TID"),
    Tool("bpftrace-printf", ("bpftrace", "-p", "{pid}", "-e", BT_PRINTF), "print",
         r"^Attaching"),
    Tool("argdist-C", ("argdist-bpfcc", "-p", "{pid}", "-C", "u:{bin}:tick()"), "count",
         r"^\[", r"^\s+(\d+)\s+total calls"),
    Tool("bpftrace-count", ("bpftrace", "-p", "{pid}", "-e",
                            "usdt:{bin}:bench:tick { @c = count(); }"), "count",
         r"^Attaching", r"^@c: (\d+)"),
]}

LOST_RE = re.compile(rb"^(?:Possibly lost (\d+) samples|Lost (\d+) events|(\d+) events lost)",
                     re.M)


def lost(blob: bytes) -> int:
    return sum(int(a or b or c) for a, b, c in LOST_RE.findall(blob))


def write_plans(outdir: Path, binaries: dict[str, str]) -> dict[str, dict[str, str]]:
    """Per workload variant: the paths of its print and count plans."""
    plans = {}
    for variant, binary in binaries.items():
        p = outdir / f"print-{variant}.yaml"
        c = outdir / f"count-{variant}.yaml"
        p.write_text(PRINT_PLAN.format(bin=binary))
        c.write_text(COUNT_PLAN.format(bin=binary))
        plans[variant] = {"plan": str(p), "count_plan": str(c)}
    v = outdir / "validate-jvm.yaml"
    v.write_text(VALIDATE_PLAN.format(jvm=JVM))
    plans["validate"] = {"plan": str(v)}
    return plans


if __name__ == "__main__":
    for tool in TOOLS.values():
        print(tool.name, " ".join(tool.argv), file=sys.stdout)
