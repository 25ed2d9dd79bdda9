"""bcc's compile of bundled plans' C alone, and where its time goes (issue 28 item 3).

    sudo .venv/bin/python bench/clang_split.py [--plans a,b] [--rounds 5]
        [--baseline TREE] [--flags 'LABEL=-Xclang -foo' ...] [--parts] [--perf LABELS]

Each plan is rendered once per tree (`pipeline.compile_plan`, the cflags the run
compiles with: `compile_flags` + the kernel's BTF offsets), then compiled by bcc in a
fresh process set up as the compile worker is (runtime/compile_worker.py: /proc/kallsyms
hidden, bcc imported before the clock starts), timed around `BPF(text=...)` alone: CPU s
(process_time) and wall s, plus the BPF instructions bcc produced (all functions). Rounds
interleave the variants, alternating their order, so the machine's load hits all alike.

Variants: `now` (this tree), `baseline` (--baseline TREE: its C and cflags), one per
--flags LABEL=FLAGS (this tree's C, FLAGS appended to the cflags), and with --parts the
parts of this tree's C: `empty` (one empty function: bcc's floor, its helpers.h and the
kernel headers it includes) and `head` (the C before the first probe: contracts,
runtime_helpers.h with the run's own programs, expr/record/python helpers), both cut
from the baseline's C and compiled with its cflags where there is a baseline.

--perf LABELS: one more compile per plan and variant named under `perf record
--call-graph dwarf`, its samples split by bcc's phases: the three clang front-end
passes bcc runs over the whole translation unit (a scan for tracepoint structs, the
B rewriter, IR generation), clang's -O2 pipeline (EmitBackendOutput), bcc's own -O3
(BPFModule::run_pass_manager), the BPF code generation (MCJIT), the rest of bcc, and
outside bcc (Python, bcc import).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import cpu_model  # a sibling: bench/ is sys.path[0]

ROOT = Path(__file__).resolve().parent.parent
PY = str(ROOT / ".venv" / "bin" / "python")
DEFAULT_PLANS = "bash-readline,python-threads,cpu-profile"

# In the tree under test: the plan's C and the cflags a run compiles it with
RENDER = """
import json, sys
from planrunner.pipeline import compile_plan
from planrunner.runtime.bcc_backend import btf_cflags, compile_flags, own_btf_cflags
from planrunner.runtime.registry_pin import tracers_pin
program = compile_plan(sys.argv[1], {})[2]
try:  # uprobes attached through the dispatcher, as on this kernel (older trees: no such flag)
    flags = compile_flags(program, tracers_pin(), False, True)
except TypeError:
    flags = compile_flags(program, tracers_pin(), False)
cflags = flags + own_btf_cflags() + btf_cflags(program.btf_constants)
try:  # the kernel offsets the C needs (in the flags themselves in older trees)
    from planrunner.runtime.bcc_backend import needed_btf_cflags
    cflags += needed_btf_cflags(program.runtime_constants)
except ImportError:
    pass
json.dump({"c": program.c_source, "cflags": cflags}, sys.stdout)
"""

# In a fresh process, as the compile worker: kallsyms hidden, bcc imported first
COMPILE = """
import json, sys, time
from planrunner.runtime.compile_worker import hide_kallsyms
hide_kallsyms()
import bcc
from bcc import lib
req = json.load(open(sys.argv[1]))
cpu, wall = time.process_time(), time.perf_counter()
b = bcc.BPF(text=req["c"].encode(), cflags=req["cflags"])
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
insns = sum(lib.bpf_function_size(b.module, lib.bpf_function_name(b.module, i)) // 8
            for i in range(lib.bpf_num_functions(b.module)))
b.cleanup()
print(json.dumps({"cpu": cpu, "wall": wall, "insns": insns}))
"""

PHASES = ("parse 1: tracepoint scan", "parse 2: B rewriter", "parse 3: IR generation",
          "parse, stack cut", "clang -O2 passes", "bcc -O3 passes", "BPF codegen (MCJIT)",
          "bcc other", "outside bcc")


def render(tree: Path, plan: str) -> dict[str, object]:
    out = subprocess.run([PY, "-c", RENDER, str(tree / "plans" / f"{plan}.yaml")],
                         env=dict(os.environ, PYTHONPATH=str(tree)), cwd=tree,
                         check=True, text=True, stdout=subprocess.PIPE)
    request: dict[str, object] = json.loads(out.stdout)
    return request


def compile_once(request_file: str, perf: str | None = None) -> dict[str, float]:
    argv = [PY, "-c", COMPILE, request_file]
    if perf:
        argv = ["perf", "record", "-q", "-F", "4999", "--call-graph", "dwarf,32768",
                "-o", perf, *argv]
    out = subprocess.run(argv, env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd="/",
                         check=True, text=True, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def perf_split(perf_data: str) -> collections.Counter[str]:
    """Samples of one compile by phase (see the module docstring). The three front-end
    passes are told apart by their return address in ClangLoader::do_compile, in the
    order bcc runs them."""
    script = subprocess.run(["perf", "script", "--no-inline", "-i", perf_data,
                             "-F", "ip,sym,symoff"],
                            check=True, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL).stdout
    stacks = [s.split("\n") for s in script.split("\n\n") if s.strip()]
    call_sites = sorted({int(m, 16) for s in stacks for f in s
                         for m in re.findall(r"ClangLoader::do_compile\+0x([0-9a-f]+)", f)
                         if _executes_action(s, f)})
    counts: collections.Counter[str] = collections.Counter()
    for stack in stacks:
        counts[_phase(stack, call_sites)] += 1
    return counts


def _executes_action(stack: list[str], frame: str) -> bool:
    at = stack.index(frame)
    return at > 0 and "ExecuteAction" in stack[at - 1]


def _phase(stack: list[str], call_sites: list[int]) -> str:
    text = "\n".join(stack)
    if "EmitBackendOutput" in text:
        return "clang -O2 passes"
    if "BPFModule::run_pass_manager" in text:
        return "bcc -O3 passes"
    if "MCJIT" in text:
        return "BPF codegen (MCJIT)"
    for frame in stack:
        m = re.search(r"ClangLoader::do_compile\+0x([0-9a-f]+)", frame)
        if m and int(m.group(1), 16) in call_sites:
            return PHASES[min(call_sites.index(int(m.group(1), 16)), 2)]
    if "bpf_module_create" in text or "ebpf::" in text:
        return "bcc other"
    if re.search(r"clang::(Parser|Sema|Lexer|Preprocessor)", text):
        return "parse, stack cut"  # deeper than the 32 KiB of stack perf copied
    return "outside bcc"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plans", default=DEFAULT_PLANS)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--baseline", type=Path)
    ap.add_argument("--flags", action="append", default=[], metavar="LABEL=FLAGS")
    ap.add_argument("--parts", action="store_true")
    ap.add_argument("--perf", default="", metavar="LABELS",
                    help="comma-separated variants to split under perf (e.g. now,empty)")
    args = ap.parse_args()
    plans = args.plans.split(",")
    loads = [" ".join(open("/proc/loadavg").read().split()[:3])]
    with tempfile.TemporaryDirectory() as tmp:
        variants: dict[str, dict[str, str]] = {}  # label -> plan -> request file
        for plan in plans:
            now = render(ROOT, plan)
            requests = {"now": now}
            if args.baseline:
                requests["baseline"] = render(args.baseline, plan)
            for spec in args.flags:
                label, _, flags = spec.partition("=")
                requests[label] = {**now, "cflags": [*now["cflags"], *shlex.split(flags)]}
            if args.parts:  # of the baseline's C and cflags where there is one
                whole = requests.get("baseline", now)
                c = str(whole["c"])
                requests["empty"] = {**whole, "c": "int pr_empty(void *ctx) { return 0; }\n"}
                requests["head"] = {**whole, "c": c[:c.index("\n/* probe ")]}
            for label, request in requests.items():
                path = os.path.join(tmp, f"{label}-{plan}.json")
                Path(path).write_text(json.dumps(request))
                variants.setdefault(label, {})[plan] = path
        labels = list(variants)
        got: dict[str, dict[str, list[dict[str, float]]]] = {
            label: {plan: [] for plan in plans} for label in labels}
        for r in range(args.rounds):
            for plan in plans:
                order = labels[r % len(labels):] + labels[:r % len(labels)]
                for label in order:
                    got[label][plan].append(compile_once(variants[label][plan]))
            loads.append(" ".join(open("/proc/loadavg").read().split()[:3]))
            print(f"round {r + 1}/{args.rounds}, load {loads[-1]}", file=sys.stderr)
        splits = {}  # (plan, label) -> samples by phase
        if args.perf:
            for plan in plans:
                for label in args.perf.split(","):
                    data = os.path.join(tmp, f"{label}-{plan}.perf")
                    compile_once(variants[label][plan], perf=data)
                    splits[plan, label] = perf_split(data)
    print(f"Command: `{shlex.join(['.venv/bin/python', *sys.argv])}`  ")
    print(f"CPU: {cpu_model()}, {os.cpu_count()} CPUs; load average (1/5/15 min) at the "
          f"start and after each round: {'; '.join(loads)}\n")
    print("bcc compile (`BPF(text=...)` alone, fresh worker-like process), median "
          f"(min..max) of {args.rounds} interleaved rounds:\n")
    print("| plan | variant | CPU s | wall s | BPF insns | CPU / now |")
    print("|---|---|---:|---:|---:|---:|")
    for plan in plans:
        base = statistics.median(x["cpu"] for x in got["now"][plan])
        for label in labels:
            runs = got[label][plan]
            cpu = [x["cpu"] for x in runs]
            wall = [x["wall"] for x in runs]
            print(f"| {plan} | {label} | {statistics.median(cpu):.3f} "
                  f"({min(cpu):.3f}..{max(cpu):.3f}) | {statistics.median(wall):.3f} | "
                  f"{int(statistics.median(x['insns'] for x in runs))} | "
                  f"{statistics.median(cpu) / base:.2f} |")
    if splits:
        print("\nperf samples of one compile each (4999 Hz; ms of samples inside bcc's "
              "compile, and their share):\n")
        print("| phase | " + " | ".join(f"{p} {lb}" for p, lb in splits) + " |")
        print("|---|" + "---:|" * len(splits))
        for phase in PHASES[:-1]:
            cells = []
            for counts in splits.values():
                inside = sum(n for p, n in counts.items() if p != "outside bcc")
                cells.append(f"{counts[phase] / 4.999:.0f} "
                             f"({100 * counts[phase] / max(inside, 1):.0f}%)")
            print(f"| {phase} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
