"""targets.resolve_target: paths, PATH (skipping scripts), ldconfig short names, a
process's mapped objects, and the error for unknown targets."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from planrunner.diagnostics import Span
from planrunner.errors import ResolveError
from planrunner.targets import library_names, resolve_target


def ldconfig_path(soname: str) -> str | None:
    tool = shutil.which("ldconfig") or "/sbin/ldconfig"
    out = subprocess.run([tool, "-p"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.strip().startswith(soname + " ") and "x86-64" in line:
            return os.path.realpath(line.split("=>")[1].strip())
    return None


def test_absolute_and_relative_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    exe = os.path.realpath(sys.executable)
    assert resolve_target(exe) == exe
    monkeypatch.chdir(os.path.dirname(exe))
    assert resolve_target("./" + os.path.basename(exe)) == exe


def test_symlinks_are_resolved(tmp_path: Path) -> None:
    link = tmp_path / "py"
    link.symlink_to(sys.executable)
    assert resolve_target(str(link)) == os.path.realpath(sys.executable)


def test_name_on_path_skips_scripts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shims, real = tmp_path / "shims", tmp_path / "bin"
    shims.mkdir()
    real.mkdir()
    script = shims / "mytool"
    script.write_text("#!/bin/sh\nexec true\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    shutil.copy(os.path.realpath(sys.executable), real / "mytool")
    monkeypatch.setenv("PATH", f"{shims}:{real}")
    assert resolve_target("mytool") == str(real / "mytool")


def test_library_short_name_c_via_ldconfig() -> None:
    expected = ldconfig_path("libc.so.6")
    if expected is None:
        pytest.skip("no x86-64 libc.so.6 in `ldconfig -p` on this host")
    assert resolve_target("c") == expected
    assert resolve_target("libc.so.6") == expected


def test_library_short_name_pthread() -> None:
    expected = ldconfig_path("libpthread.so.0")
    if expected is None:
        pytest.skip("no libpthread.so.0 in `ldconfig -p` on this host")
    assert resolve_target("pthread") == expected


def test_ld_library_path_is_searched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lib = tmp_path / "libplanrunnerzz.so.1"
    shutil.copy(os.path.realpath(sys.executable), lib)
    monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path))
    assert resolve_target("planrunnerzz") == str(lib)


def test_name_mapped_in_a_process() -> None:
    libc = resolve_target("c", pid=os.getpid())
    assert os.path.basename(libc).startswith("libc")
    assert resolve_target(os.path.basename(libc), pid=os.getpid()) == libc


@pytest.mark.parametrize(("soname", "names"), [
    ("libc.so.6", ("c",)), ("libpython3.11.so.1.0", ("python3.11",)),
    ("/usr/lib/libjvm.so", ("jvm",)), ("libgtk-3.so.0", ("gtk-3", "gtk")), ("ld-linux.so.2", ()),
])
def test_library_names(soname: str, names: tuple[str, ...]) -> None:
    assert library_names(soname) == names


def test_unknown_target_says_what_to_do() -> None:
    span = Span("plan.yaml", 3, 9)
    with pytest.raises(ResolveError) as info:
        resolve_target("no-such-program-xyz", span=span)
    diag = info.value.diagnostics[0]
    assert diag.message == "target 'no-such-program-xyz' not found on PATH or in the library cache"
    assert diag.span == span
    assert any("absolute path" in h and "ldconfig -p" in h for h in diag.hints)


def test_near_miss_library_name_is_suggested() -> None:
    if ldconfig_path("libpthread.so.0") is None:
        pytest.skip("no libpthread.so.0 in `ldconfig -p` on this host")
    with pytest.raises(ResolveError) as info:
        resolve_target("pthraed")
    assert "did you mean the library 'pthread'?" in info.value.diagnostics[0].hints


def test_missing_path_and_directory(tmp_path: Path) -> None:
    with pytest.raises(ResolveError, match="not found"):
        resolve_target(str(tmp_path / "nope"))
    with pytest.raises(ResolveError, match="is a directory"):
        resolve_target(str(tmp_path))


def test_unknown_name_with_pid_points_at_the_listing() -> None:
    pid = os.getpid()
    with pytest.raises(ResolveError) as info:
        resolve_target("no-such-lib-xyz", pid=pid)
    diag = info.value.diagnostics[0]
    assert f"not mapped in process {pid}" in diag.message
    assert f"`planrunner list --pid {pid}` shows the objects it has mapped" in diag.hints


def test_a_path_with_a_pid_of_this_system_is_the_hosts_file_without_a_note(
        tmp_path: Path) -> None:
    """Inside and outside name one file (a process sharing our root): the host's path,
    not /proc/PID/root/..., and nothing to say."""
    exe = tmp_path / "prog"
    shutil.copy(sys.executable, exe)
    notes: list[str] = []
    assert resolve_target(str(exe), pid=os.getpid(), notes=notes) == str(exe.resolve())
    assert notes == []


def test_a_path_of_a_process_in_a_chroot_is_its_file_with_a_note(tmp_path: Path) -> None:
    """A pid whose root is `tmp_path/root`, where /app is another file than the host's
    /…/app: the process's, through /proc/PID/root, and a note; never the host's."""
    if os.geteuid() != 0:
        pytest.skip("needs root to give a process another root (chroot(2))")
    root = tmp_path / "root"
    host_app = tmp_path / "app"
    shutil.copy("/bin/sleep", host_app)
    inner = root / str(host_app).lstrip("/")
    inner.parent.mkdir(parents=True)
    shutil.copy("/bin/sleep", inner)
    # a process whose root is `root` (it calls chroot(2) itself, then waits)
    proc = subprocess.Popen([sys.executable, "-c", "import os, sys, time; "
                             "os.chroot(sys.argv[1]); print(flush=True); time.sleep(30)",
                             str(root)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"\n"
        notes: list[str] = []
        got = resolve_target(str(host_app), pid=proc.pid, notes=notes)
        assert got == f"/proc/{proc.pid}/root{host_app}"
        assert os.stat(got).st_ino == os.stat(inner).st_ino
        assert len(notes) == 1 and "another file than the host's" in notes[0], notes
    finally:
        proc.kill()
        proc.wait()
