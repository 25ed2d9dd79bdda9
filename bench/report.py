"""The Markdown report of bench/run.py: goal lines first (issue 7), then one table per
phase. Every ratio is taken within a round (or rep) and its median reported."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from pathlib import Path

BEGIN = "<!-- bench/run.py: begin (generated; replaced by --write-benchmarks) -->"
END = "<!-- bench/run.py: end -->"


def med(xs: Iterable[object]) -> float | None:
    vals = [float(x) for x in xs if isinstance(x, int | float)]
    return statistics.median(vals) if vals else None


def fmt(x: object, nd: int | None = None) -> str:
    if not isinstance(x, int | float):
        return "n/a" if x is None else str(x)
    if nd is not None:
        return f"{x:.{nd}f}"
    ax = abs(x)
    return f"{x:.0f}" if ax >= 100 else f"{x:.1f}" if ax >= 10 else f"{x:.2f}" if ax >= 1 \
        else f"{x:.3f}"


def spread(xs: list[float]) -> str:
    xs = [x for x in xs if isinstance(x, int | float)]
    return f"{fmt(med(xs))} ({fmt(min(xs))}..{fmt(max(xs))})" if xs else "n/a"


def overhead_summary(rows: list[dict], key: str = "cpu_ns_per_hit",
                     wall: str = "ns_per_iter") -> list[dict]:
    """Per (tool, build): CPU ns per hit in the target, and its ratio to the floor of the
    same round and build (the goals are on CPU; wall time is shown beside it)."""
    by_round: dict[int, dict[tuple[str, str], dict]] = {}
    for r in rows:
        by_round.setdefault(int(r["round"]), {})[(r["tool"], r["variant"])] = r
    seen: list[tuple[str, str]] = []
    for r in rows:
        if (r["tool"], r["variant"]) not in seen:
            seen.append((r["tool"], r["variant"]))
    out = []
    for tool, variant in seen:
        vals, walls, ratios, deliv, lost, errs = [], [], [], [], [], []
        for d in by_round.values():
            r = d.get((tool, variant))
            if r is None:
                continue
            if "error" in r or key not in r:
                errs.append(str(r.get("error")))
                continue
            vals.append(r[key])
            walls.append(r.get(wall))
            floor = d.get(("floor", variant))
            if floor and key in floor and "error" not in floor:
                ratios.append(r[key] / floor[key])
            if r.get("delivered") is not None and r.get("fired"):
                deliv.append(r["delivered"] / r["fired"])
            lost.append(r.get("lost"))
        out.append({"tool": tool, "variant": variant, "vals": vals, "walls": walls,
                    "x_floor": med(ratios),
                    "deliv": med(deliv), "lost": med(lost), "errors": errs})
    return out


def _goal(rows: list[tuple[str, str, str, str, bool | None]]) -> list[str]:
    lines = ["| goal | figure (planrunner) | anchor, same run | target | met |",
             "|---|---|---|---|---|"]
    for goal, fig, anchor, target, ok in rows:
        lines.append(f"| {goal} | {fig} | {anchor} | {target} | "
                     f"{'yes' if ok else 'NO' if ok is not None else 'n/a'} |")
    return lines


def _find(summary: list[dict], tool: str, variant: str = "plain") -> dict:
    return next((s for s in summary if s["tool"] == tool and s["variant"] == variant), {})


def goals(res: dict) -> list[str]:
    rows = []
    if "overhead" in res:
        s = overhead_summary(res["overhead"])
        pr, tr, bt = (_find(s, n) for n in ("planrunner", "trace-bpfcc", "bpftrace-printf"))
        prx, trx, btx = pr.get("x_floor"), tr.get("x_floor"), bt.get("x_floor")
        deliv = pr.get("deliv")
        rows.append(("1 per hit, printing every event, back to back",
                     f"{fmt(prx, 2)}x floor ({fmt(None if deliv is None else 100 * deliv, 0)}% "
                     "printed, the rest dropped and counted)",
                     f"trace {fmt(trx, 1)}x, bpftrace printf {fmt(btx, 1)}x", "<= 1.5x, "
                     ">= 10x cheaper", None if prx is None else prx <= 1.5 and bool(
                         trx and btx and min(trx, btx) / prx >= 10)))
        cnt = _find(s, "planrunner-count").get("x_floor")
        rows.append(("2 aggregation (plain count)", f"{fmt(cnt, 3)}x floor",
                     f"argdist {fmt(_find(s, 'argdist-C').get('x_floor'), 3)}x, bpftrace "
                     f"{fmt(_find(s, 'bpftrace-count').get('x_floor'), 3)}x", "<= 1.05x",
                     None if cnt is None else cnt <= 1.05))
    if "rate" in res:  # every event printed: the success path of every record
        paced = overhead_summary(res["rate"], key="busy_ns_per_fire")
        ppx, ptx, pbx = (_find(paced, n).get("x_floor")
                         for n in ("planrunner", "trace-bpfcc", "bpftrace-printf"))
        rows.append(("1 per hit, paced 10k/s, every event printed",
                     f"{fmt(ppx, 2)}x floor (busy wall time)",
                     f"trace {fmt(ptx, 1)}x, bpftrace printf {fmt(pbx, 1)}x", "<= 1.5x, "
                     ">= 10x cheaper", None if ppx is None else ppx <= 1.5 and bool(
                         ptx and pbx and min(ptx, pbx) / ppx >= 10)))
    tp = res.get("throughput", [])
    for name in ("planrunner", "planrunner-json"):
        r = next((r for r in tp if r["tool"] == name and r["hz"] == 100_000), None)
        if r:
            ok = r.get("lost") == 0 and r.get("delivered") == r.get("fired")
            rows.append((f"3 zero loss at 100k/s, {fmt(r['secs'], 0)} s ({name})",
                         f"{r.get('delivered')}/{fmt(r.get('fired'), 0)} printed, "
                         f"{r.get('lost')} lost", "-", "0 lost", ok))
    flood = {r["tool"]: r for r in tp if r["hz"] == 1_000_000}
    bt = flood.get("bpftrace-printf", {}).get("delivered_per_s")
    for name in ("planrunner", "planrunner-json"):
        d = flood.get(name, {}).get("delivered_per_s")
        if d is not None:
            rows.append((f"3 delivered/s at 1M/s offered ({name})",
                         f"{fmt(d, 0)}/s ({flood[name].get('lost')} lost, counted)",
                         f"bpftrace printf {fmt(bt, 0)}/s", ">= 3x bpftrace",
                         None if not bt else d / bt >= 3))
    st = res.get("startup", [])
    if st:
        ratios = []
        for rep in {r["rep"] for r in st}:
            d = {r["tool"]: r for r in st if r["rep"] == rep}
            p, t = d.get("planrunner", {}), d.get("trace-bpfcc", {})
            if p.get("ready_s") and t.get("ready_s"):
                ratios.append(p["ready_s"] / t["ready_s"])
        p = med(r["ready_s"] for r in st if r["tool"] == "planrunner")
        t = med(r["ready_s"] for r in st if r["tool"] == "trace-bpfcc")
        x = med(ratios)
        rows.append(("4 startup, launch -> attached", f"{fmt(p, 3)} s ({fmt(x, 2)}x trace)",
                     f"trace {fmt(t, 3)} s", "<= 0.5x trace", None if x is None else x <= 0.5))
    for r in res.get("stop", []):
        limit = 0.2 if r["case"].startswith("SIGINT") else 0.5
        late = r.get("late_s")
        rows.append((f"5 stop: {r['case']}", f"{fmt(late, 3)} s", "-", f"<= {limit} s",
                     None if late is None else late <= limit))
    lst = {r["cmd"]: r for r in res.get("listing", [])}
    if lst:
        x = med(lst["planrunner list"]["x_tplist"])
        rows.append(("6 list libjvm.so", f"{fmt(med(lst['planrunner list']['walls']), 3)} s "
                     f"({fmt(x, 2)}x tplist)", f"tplist {fmt(med(lst['tplist -l']['walls']), 3)}"
                     f" s, bpftrace -l {fmt(med(lst['bpftrace -l']['walls']), 3)} s",
                     "<= tplist", None if x is None else x <= 1.0))
        v = med(lst["planrunner validate"]["walls"])
        rows.append(("6 validate against libjvm.so", f"{fmt(v, 3)} s", "-", "< 0.2 s",
                     None if v is None else v < 0.2))
    if flood.get("planrunner") and flood.get("trace-bpfcc"):
        p, t = flood["planrunner"].get("rss_mib"), flood["trace-bpfcc"].get("rss_mib")
        rows.append(("7 peak RSS, 1M/s flood", f"{fmt(p, 1)} MiB", f"trace {fmt(t, 1)} MiB",
                     "<= trace", None if not (p and t) else p <= t))
    rows.sort(key=lambda row: int(row[0].split()[0]))  # by goal number; stable within one
    return _goal(rows)


def _overhead_table(title: str, rows: list[dict], wall: str, unit: str,
                    key: str = "cpu_ns_per_hit", label: str = "target CPU ns/hit") -> list[str]:
    out = [f"### {title}", "", f"| tool | build | {label} median (min..max) | x floor "
           f"(same round) | {unit} median | delivered/fired | lost |", "|---" * 7 + "|"]
    for s in overhead_summary(rows, key=key, wall=wall):
        vals = spread(s["vals"]) if s["vals"] else "FAILED: " + "; ".join(s["errors"])[:100]
        out.append(f"| {s['tool']} | {s['variant']} | {vals} | "
                   f"{'-' if s['tool'] in ('none', 'floor') else fmt(s['x_floor'], 2)} | "
                   f"{fmt(med(s['walls']))} | {fmt(s['deliv'], 4)} | {fmt(s['lost'], 0)} |")
    return out + [""]


def markdown(res: dict) -> str:
    lines = [f"Command: `sudo .venv/bin/python {res['command']}`", "",
             f"Machine: {res['machine']}", "", "### Goals of issue 7", ""]
    lines += goals(res) + [""]
    if "overhead" in res:
        lines += _overhead_table("Per hit, back to back (`workload loop`)", res["overhead"],
                                 "ns_per_iter", "wall ns/hit")
    if "rate" in res:
        # paced: CPU per event is mostly the pacing loop, so the ratio is on busy time
        lines += _overhead_table("Per hit at a paced 10k/s (`workload rate 10000 1.5`)",
                                 res["rate"], "cpu_ns_per_hit", "target CPU ns/event",
                                 key="busy_ns_per_fire", label="busy wall ns/event")
    if res.get("throughput"):
        lines += ["### Throughput (stdout to a file)", "",
                  "| tool | offered/s | s | fired | printed | lost reported | printed/s "
                  "| tracer CPU s | peak RSS MiB | stop |", "|---" * 10 + "|"]
        for r in res["throughput"]:
            lines.append(f"| {r['tool']} | {r['hz']} | {fmt(r['secs'], 0)} | "
                         f"{fmt(r.get('fired'), 0)} | {r.get('delivered')} | {r.get('lost')} | "
                         f"{fmt(r.get('delivered_per_s'), 0)} | {fmt(r.get('tracer_cpu_s'))} | "
                         f"{fmt(r.get('rss_mib'), 1)} | "
                         f"{'SIGKILL' if r.get('killed') else 'SIGINT ok'}"
                         f"{' ' + str(r['error']) if r.get('error') else ''} |")
        lines.append("")
    if res.get("startup"):
        lines += ["### Startup against a 1000/s target (stdout on a pty)", "",
                  "| tool | launch -> attached s | launch -> first event s | SIGINT -> exit s "
                  "| CPU s |", "|---|---|---|---|---|"]
        for name in dict.fromkeys(r["tool"] for r in res["startup"]):
            rs = [r for r in res["startup"] if r["tool"] == name]
            lines.append(f"| {name} | {spread([r['ready_s'] for r in rs])} | "
                         f"{spread([r['first_event_s'] for r in rs])} | "
                         f"{fmt(med(r['sigint_exit_s'] for r in rs), 3)} | "
                         f"{fmt(med(r['cpu_s'] for r in rs), 2)} |")
        lines.append("")
    if res.get("stop"):
        lines += ["### Stopping (planrunner, timed from its `Tracing` line, or from the "
                  "SIGINT; --duration: time past D)", "", "| case | late by s | rc |",
                  "|---|---|---|"]
        lines += [f"| {r['case']} | {fmt(r['late_s'], 3)} | {r['rc']} |" for r in res["stop"]]
        lines.append("")
    if res.get("listing"):
        lines += ["### Listing and validating (libjvm.so; fresh processes, interleaved)", "",
                  "| command | wall s median (min..max) | rc |", "|---|---|---|"]
        lines += [f"| `{r['argv']}` | {spread(r['walls'])} | {r['rc']} |"
                  for r in res["listing"]]
        lines.append("")
    for key, title in (("agg", "bench/agg_overhead.py (count by key)"),
                       ("list", "bench/list_bench.py")):
        if key in res:
            lines += [f"### {title}", "", res[key], ""]
    lines.append(f"Total run time: {res.get('elapsed_s')} s")
    return "\n".join(lines) + "\n"


def write_benchmarks(path: Path, md: str) -> None:
    """Replace (or append) the generated section of BENCHMARKS.md; others' sections stay."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    md = md.replace(f"{path.resolve().parent}/", "")  # repo-relative: no paths of this machine
    block = f"{BEGIN}\n{md}{END}\n"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + "\n" + rest.split(END, 1)[1].lstrip("\n")
    else:
        text = text.rstrip("\n") + "\n\n" + block
    path.write_text(text)
