"""The registry of planrunner runs squatted (issue 23 item 13): /sys/fs/bpf is
world-writable, so a user can create /sys/fs/bpf/planrunner_tracers before the first
run after boot. Whatever is there (a directory of another user, a dangling symbolic
link, a map another uid pinned), a root run still traces, with the registry pinned in
the root-only /sys/fs/bpf/planrunner/ (runtime/registry_pin.py); when that is squatted
too, the run fails saying what it found at both places.

Every case runs in a private mount namespace with a BPF filesystem of its own
(`unshare -m`, then `mount -t bpf`), so that the machine's registry, which other runs
use meanwhile, is never touched.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import PLANRUNNER, ROOT, json_records, write_plan

LEGACY = "/sys/fs/bpf/planrunner_tracers"
PRIVATE = "/sys/fs/bpf/planrunner"
NOBODY = 65534
# a map of the registry's layout (one element of 192 bytes) pinned, then given away
PIN_A_MAP = ("import os; from planrunner.runtime.kernel import bpf; "
             "fd = bpf.map_create(2, 4, 192, 1, name='squat'); "
             f"bpf.obj_pin(fd, {LEGACY!r}); os.chown({LEGACY!r}, {NOBODY}, -1)")
PY = shlex.quote(PLANRUNNER[0])
PLANTS = {
    "directory": f"mkdir {LEGACY} && chown {NOBODY} {LEGACY}",
    "dangling symlink": f"ln -s /nonexistent/planrunner {LEGACY}",
    "map of another uid": f"{PY} -c {shlex.quote(PIN_A_MAP)}",
}


def _in_private_bpffs(script: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux) for a private BPF filesystem")
    return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                           f"mount -t bpf bpf /sys/fs/bpf || exit 99\n{script}"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def _plan(tmp_path: Path, paced: Path) -> str:
    return write_plan(tmp_path, f"""
planrunner: 1
targets: {{p: {{binary: {paced}}}}}
probes:
  tick: {{usdt: p:paced:tick, args: [{{name: i}}]}}
outputs:
  - {{print: tick, fields: [i]}}
""")


def _run_line(plan: str, paced: Path) -> str:
    run = shlex.join([*PLANRUNNER, "run", plan, "-f", "json", "-c", f"{paced} 3 0 20"])
    return f'{run}; echo "rc=$?"'


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_a_squatted_pin_falls_back_on_the_root_only_directory(fixtures_built, tmp_path,
                                                               plant):
    """Two runs (the second from the compile cache, which keys on the pin): each
    records the 3 ticks, the squatter's object is left as it was, and the registry is
    a map of root's in /sys/fs/bpf/planrunner (0700)."""
    paced = fixtures_built / "paced"
    plan = _plan(tmp_path, paced)
    run = _run_line(plan, paced)
    res = _in_private_bpffs(f"{PLANTS[plant]} || exit 98\n{run}\n{run}\n"
                            f"stat -c '%F %u %a %n' {PRIVATE} {PRIVATE}/tracers\n"
                            f"stat -c '%F %u' {LEGACY}\n")
    assert res.returncode not in (98, 99), res.stderr
    assert res.stdout.count("rc=0") == 2, res.stdout + res.stderr
    ticks = [r["i"] for r in json_records("\n".join(
        line for line in res.stdout.splitlines() if line.startswith("{")))]
    assert ticks == [1, 2, 3, 1, 2, 3], res.stdout
    stats = [line for line in res.stdout.splitlines() if line and line[0].isalpha()
             and not line.startswith("rc=")]
    assert stats[0] == f"directory 0 700 {PRIVATE}", stats
    assert stats[1] == f"regular empty file 0 600 {PRIVATE}/tracers", stats
    legacy = {"directory": f"directory {NOBODY}", "dangling symlink": "symbolic link 0",
              "map of another uid": f"regular empty file {NOBODY}"}[plant]
    assert stats[2] == legacy, stats


def test_a_free_pin_is_still_the_default(fixtures_built, tmp_path):
    """Nothing squatted: the registry stays at /sys/fs/bpf/planrunner_tracers, where
    older planrunners find it too, and no private directory is made."""
    paced = fixtures_built / "paced"
    run = _run_line(_plan(tmp_path, paced), paced)
    res = _in_private_bpffs(f"{run}\nstat -c '%F %u %a' {LEGACY}\n"
                            f"test -e {PRIVATE} && echo private-made\n")
    assert "rc=0" in res.stdout, res.stdout + res.stderr
    assert "regular empty file 0 600" in res.stdout, res.stdout
    assert "private-made" not in res.stdout


def test_both_places_squatted_fail_saying_what_was_found(fixtures_built, tmp_path):
    paced = fixtures_built / "paced"
    run = _run_line(_plan(tmp_path, paced), paced)
    res = _in_private_bpffs(f"ln -s /nonexistent/x {LEGACY} && mkdir -m 777 {PRIVATE} && "
                            f"chown {NOBODY} {PRIVATE} || exit 98\n{run}\n")
    assert "rc=1" in res.stdout, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    assert (f"{LEGACY} is a dangling symbolic link to /nonexistent/x (owner uid 0)"
            in res.stderr), res.stderr
    assert f"{PRIVATE} is a directory of uid {NOBODY} with mode 777" in res.stderr
    assert "Tracing" not in res.stderr
