"""runtime/registry_pin.py without a BPF filesystem: what `foreign` says of what a user
may have put at the registry's pin (issue 23 item 13), and the -D that moves the pin.
The fallback itself, on a real (private) BPF filesystem: tests/e2e/test_registry_pin_e2e.py."""

from __future__ import annotations

import os
from pathlib import Path

from planrunner.render.model import TRACERS_PIN
from planrunner.runtime.registry_pin import _private_dir, foreign, pin_cflags


def test_nothing_there_is_free(tmp_path: Path) -> None:
    assert foreign(str(tmp_path / "absent")) is None


def test_a_dangling_symlink_is_named_with_its_target(tmp_path: Path) -> None:
    link = tmp_path / "pin"
    link.symlink_to("/nonexistent/x")
    assert foreign(str(link)) == ("a dangling symbolic link to /nonexistent/x "
                                  f"(owner uid {os.geteuid()})")


def test_a_directory_is_named_with_its_owner_and_mode(tmp_path: Path) -> None:
    d = tmp_path / "pin"
    d.mkdir(mode=0o755)
    d.chmod(0o755)
    assert foreign(str(d)) == f"a directory (owner uid {os.geteuid()}, mode 755)"


def test_a_plain_file_is_not_a_pinned_map(tmp_path: Path) -> None:
    f = tmp_path / "pin"
    f.write_text("")
    found = foreign(str(f))
    assert found is not None and (found.startswith("a BPF object pinned by uid")
                                  or found.startswith("not a BPF map")), found


def test_the_private_directory_is_made_0700_and_a_writable_one_refused(tmp_path: Path
                                                                       ) -> None:
    made = tmp_path / "planrunner"
    why = _private_dir(str(made))
    assert made.is_dir() and (made.stat().st_mode & 0o777) == 0o700
    assert why is None if os.geteuid() == 0 else why is not None
    made.chmod(0o777)
    assert _private_dir(str(made)) == f"a directory of uid {os.geteuid()} with mode 777"


def test_only_a_moved_pin_changes_the_cflags() -> None:
    assert pin_cflags(TRACERS_PIN) == []
    assert pin_cflags("/sys/fs/bpf/planrunner/tracers") == [
        '-DPR_TRACERS_PIN="/sys/fs/bpf/planrunner/tracers"']
