"""`run -f pprof` end to end (issue 25): real BPF sampling of a real process, the profile
read back by a real consumer, `go tool pprof` (Debian golang-go, scripts/setup.sh).

- plans/cpu-profile.yaml on fx_spin (tests/fixtures/stacks: 3:1 of CPU time in
  spin_a/spin_b, its own measure of each printed at exit): `-traces` puts spin_a's share
  of the fixture's samples within TOLERANCE of the share the fixture measured, `-top`
  shows the CPU time of both (count x 1e9/99 ns), `-raw` the sampling period and the
  fixture's own mapping (its path, file offset and build-id); --flamegraph still draws.
- a -g build of fx_spin: `-top -lines` puts most of spin_a's samples on its loop's
  line of fx_spin.c (the DWARF line table, stacks/lines.py);
- a plan with two stack-keyed outputs and `-o DIR/`: one profile per output.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from planrunner.elf.reader import open_binary
from tests.e2e.conftest import run_planrunner, write_plan
from tests.unit.stacks_fixture import missing_toolchain, session_build

# Samples are a statistic: ~200 samples at 99 Hz (2 s of CPU time) and a 3:1 split give
# spin_a's share a standard deviation of about 0.03 (sqrt(p(1-p)/n)); 0.10 is ~3 sigma
# (as tests/e2e/test_stacks_e2e.py): 0.75 expected, 0.65..0.85 accepted. Measured on
# the fixture's own split (its thread CPU time in each), not on the nominal 3:1.
TOLERANCE = 0.10
PERIOD_NS = round(1e9 / 99)  # plans/cpu-profile.yaml: profile: {hz: 99}


@pytest.fixture(scope="module")
def go() -> str:
    path = shutil.which("go")
    if path is None:
        pytest.skip("no `go` to read the profile (Debian: apt-get install golang-go; "
                    "scripts/setup.sh)")
    return path


@pytest.fixture(scope="module")
def fx_spin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    why = missing_toolchain()
    if why:
        pytest.skip(why)
    return session_build(tmp_path_factory)["nofp_pie"] / "fx_spin"


def pprof(go: str, *args: str) -> str:
    res = subprocess.run([go, "tool", "pprof", *args], capture_output=True, text=True,
                         timeout=180)
    assert res.returncode == 0, res.stderr
    return res.stdout


def traces(text: str) -> list[tuple[float, list[str]]]:
    """`go tool pprof -traces` blocks: (value in ms, frames leaf first)."""
    out = []
    for block in text.split("-----------+")[1:]:
        value, frames = None, []
        for line in block.splitlines()[1:]:
            if not line.strip() or line.strip().startswith("comm:"):
                continue
            m = re.match(r"\s*([\d.]+)(ms|s|us)\s+(\S+)", line)
            if m:
                scale = {"s": 1000.0, "ms": 1.0, "us": 0.001}[m.group(2)]
                value = float(m.group(1)) * scale
                frames.append(m.group(3))
            else:
                frames.append(line.strip())
        if not frames:
            continue  # the closing rule
        assert value is not None, block
        out.append((value, frames))
    return out


def test_cpu_profile_read_by_go_tool_pprof_follows_the_cpu_time_ratio(
        go: str, fx_spin: Path, tmp_path: Path) -> None:
    profile, svg = tmp_path / "cpu.pb.gz", tmp_path / "cpu.svg"
    res = run_planrunner(["run", "cpu-profile", "-c", f"{fx_spin} 2", "-f", "pprof",
                          "-o", str(profile), "--flamegraph", str(svg)], timeout=120)
    assert res.returncode == 0, res.stderr
    truth = re.search(r"a_ns (\d+) b_ns (\d+)", res.stdout)
    assert truth, res.stdout
    a_ns, b_ns = int(truth.group(1)), int(truth.group(2))
    assert profile.read_bytes()[:2] == b"\x1f\x8b"  # gzip

    ms = {"spin_a": 0.0, "spin_b": 0.0}
    blocks = traces(pprof(go, "-traces", str(profile)))
    for value, frames in blocks:
        spin = [f for f in frames if f in ms]
        if spin:
            ms[spin[0]] += value
            # whole stacks, outermost last: through main to _start
            assert "main" in frames and frames[-1] == "_start", frames
    samples = (ms["spin_a"] + ms["spin_b"]) / (PERIOD_NS / 1e6)
    assert samples >= 100, blocks  # ~2 s at 99 Hz
    share = ms["spin_a"] / (ms["spin_a"] + ms["spin_b"])
    assert abs(share - a_ns / (a_ns + b_ns)) <= TOLERANCE, (ms, a_ns, b_ns)

    top = pprof(go, "-top", str(profile))
    assert "Type: cpu" in top
    flat = {m.group(2): m.group(1) for m in
            re.finditer(r"^\s*([\d.]+m?s)\s.*\s(spin_[ab])$", top, re.MULTILINE)}
    assert set(flat) == {"spin_a", "spin_b"}, top

    raw = pprof(go, "-raw", str(profile))
    assert "PeriodType: cpu nanoseconds" in raw and f"Period: {PERIOD_NS}" in raw
    assert "samples/count cpu/nanoseconds[dflt]" in raw
    build_id = open_binary(str(fx_spin)).build_id
    assert build_id
    mapping = re.search(rf"^\d+: 0x([0-9a-f]+)/0x([0-9a-f]+)/0x([0-9a-f]+) "
                        rf"{re.escape(str(fx_spin))} {build_id} \[FN\]$", raw, re.MULTILINE)
    assert mapping, raw
    start, limit, offset = (int(g, 16) for g in mapping.groups())
    assert start < limit and offset % 4096 == 0 and start % 4096 == 0
    # every sample's value pair is count, count x period
    for count, nanos in re.findall(r"^\s+(\d+)\s+(\d+): [\d ]+$", raw, re.MULTILINE):
        assert int(nanos) == int(count) * PERIOD_NS

    assert "<title>spin_a (" in svg.read_text()  # --flamegraph still draws


def test_lines_of_a_build_with_debug_info(go: str, fx_spin: Path, tmp_path: Path) -> None:
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc  # the fx_spin fixture was built
    source = Path(__file__).resolve().parents[1] / "fixtures/stacks/fx_spin.c"
    binary = tmp_path / "fx_spin_g"
    subprocess.run([cc, "-O2", "-g", "-o", str(binary), str(source)], check=True)
    loop = {i for i, t in enumerate(source.read_text().splitlines(), 1) if "sink +=" in t}
    profile = tmp_path / "cpu.pb.gz"
    res = run_planrunner(["run", "cpu-profile", "-c", f"{binary} 1", "-f", "pprof",
                          "-o", str(profile)], timeout=120)
    assert res.returncode == 0, res.stderr
    top = pprof(go, "-top", "-lines", str(profile))
    flat: dict[int, float] = {}
    for m in re.finditer(r"^\s*([\d.]+)(ms|s)\s.*\sspin_a \S*fx_spin\.c:(\d+)$", top,
                         re.MULTILINE):
        ms = float(m.group(1)) * (1000.0 if m.group(2) == "s" else 1.0)
        flat[int(m.group(3))] = flat.get(int(m.group(3)), 0.0) + ms
    assert flat, top
    # the loop is where the time goes (the rest: the clock_gettime call between loops)
    assert sum(v for k, v in flat.items() if k in loop) > 0.5 * sum(flat.values()), top
    raw = pprof(go, "-raw", str(profile))
    assert re.search(rf"{re.escape(str(binary))} [0-9a-f]+ \[FN\]\[FL\]\[LN\]", raw), raw


def test_two_outputs_write_one_profile_each(go: str, fx_spin: Path, tmp_path: Path) -> None:
    plan = write_plan(tmp_path, """
planrunner: 1
stack: {unwind: auto}
probes:
  cpu: {profile: {hz: 99}}
outputs:
  - {count: cpu, name: user, by: [comm, ustack]}
  - {count: cpu, name: kernel, by: [kstack]}
""")
    out = tmp_path / "out"
    res = run_planrunner(["run", plan, "-c", f"{fx_spin} 1", "-f", "pprof",
                          "-o", f"{out}/"], timeout=120)
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in out.iterdir()) == ["kernel.pb.gz", "user.pb.gz"]
    user = pprof(go, "-top", str(out / "user.pb.gz"))
    assert re.search(r"\sspin_a$", user, re.MULTILINE), user
    kernel = pprof(go, "-raw", str(out / "kernel.pb.gz"))
    assert "samples/count cpu/nanoseconds[dflt]" in kernel
    assert "spin_a" not in kernel  # kernel stacks only


def test_pprof_refuses_an_output_not_keyed_by_a_stack(tmp_path: Path) -> None:
    plan = write_plan(tmp_path, """
planrunner: 1
probes:
  cpu: {profile: {hz: 99}}
outputs:
  - {count: cpu, by: [comm]}
""")
    res = run_planrunner(["run", plan, "-d", "1", "-f", "pprof", "-o",
                          str(tmp_path / "p.pb.gz")], timeout=120)
    assert res.returncode == 2, res.stderr
    assert "output 'cpu'" in res.stderr and "not keyed by a stack" in res.stderr
    assert "Traceback" not in res.stderr and "Tracing" not in res.stderr
    assert not (tmp_path / "p.pb.gz").exists()
