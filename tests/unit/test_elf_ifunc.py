"""elf/ifunc.py and the uprobe resolution of IFUNC symbols: a uprobe on `twice` (an
IFUNC of the libifunc.so fixture) lands on twice_fast, the implementation its resolver
picks, once the library is loaded in this process; a library that is not loaded is
refused with the implementations listed; glibc's strlen resolves to the code this
process runs for strlen, byte for byte; and of two versions of a libc symbol the
default one (@@) is the one looked up."""

from __future__ import annotations

import ctypes
import io
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from planrunner import inputs
from planrunner.cli import main
from planrunner.elf.ifunc import resolve_ifunc
from planrunner.elf.reader import vaddr_to_offset
from planrunner.elf.symbols import lookup_symbol
from planrunner.errors import ResolveError

ELF = Path(__file__).parents[1] / "fixtures" / "elf"


def _build(tmp: Path, name: str) -> str:
    if shutil.which("gcc") is None or shutil.which("make") is None:
        pytest.skip("needs gcc and make to build the fixtures")
    subprocess.run(["make", "-s", "-C", str(ELF), f"OUT={tmp}", f"{tmp}/{name}"], check=True)
    return str(tmp / name)


def _libc() -> str:
    for line in Path("/proc/self/maps").read_text().splitlines():
        path = line.split()[-1]
        if re.search(r"/libc\.so\.6$", path):
            return path
    pytest.skip("this process has no glibc libc.so.6 mapped")


def test_a_library_not_loaded_here_is_refused_with_its_implementations(tmp_path):
    lib = _build(tmp_path, "libifunc.so")
    [sym] = lookup_symbol(lib, "twice")
    assert sym.type == "STT_GNU_IFUNC"
    with pytest.raises(ResolveError) as err:
        resolve_ifunc(lib, sym)
    message = err.value.diagnostics[0].message
    assert "'twice'" in message and "IFUNC" in message and "dlopen" in message
    assert "twice_fast, twice_slow" in err.value.diagnostics[0].hints[0]


def test_a_loaded_library_resolves_to_the_resolvers_pick(tmp_path):
    lib = _build(tmp_path, "libifunc.so")
    handle = ctypes.CDLL(lib)  # what a traced process does; the resolver picks twice_fast
    assert handle.twice(21) == 42
    [sym] = lookup_symbol(lib, "twice")
    [fast] = lookup_symbol(lib, "twice_fast")
    got = resolve_ifunc(lib, sym)
    assert (got.vaddr, got.name, got.size) == (fast.value, "twice_fast", fast.size)
    assert got.vaddr != sym.value


def test_an_ifunc_resolution_is_keyed_by_this_cpu(tmp_path):
    """The resolver's pick depends on the CPU: a run-cache entry that resolved an IFUNC
    records the CPU, so a cache carried to another CPU model is a miss."""
    lib = _build(tmp_path, "libifunc.so")
    ctypes.CDLL(lib)
    [sym] = lookup_symbol(lib, "twice")
    with inputs.recording() as log:
        resolve_ifunc(lib, sym)
    [(kind, what, found)] = [i for i in log.inputs() if i[0] == "cpu"]
    assert inputs.changed([(kind, what, found)]) is None
    assert inputs.changed([(kind, what, "another cpu")]) == "the CPU changed"


def test_glibc_strlen_resolves_to_the_code_this_process_calls():
    libc = _libc()
    [sym] = lookup_symbol(libc, "strlen")
    if sym.type != "STT_GNU_IFUNC":
        pytest.skip(f"strlen is {sym.type} in {libc}, not an IFUNC")
    got = resolve_ifunc(libc, sym)
    assert got.vaddr != sym.value
    called = ctypes.cast(ctypes.CDLL(None).strlen, ctypes.c_void_p).value
    code = ctypes.string_at(called, 32)  # the first bytes of what strlen() runs here
    with open(libc, "rb") as fh:
        fh.seek(vaddr_to_offset(libc, got.vaddr))
        assert fh.read(32) == code


def test_validate_says_which_implementation_it_probes(tmp_path):
    libc = _libc()
    [sym] = lookup_symbol(libc, "strlen")
    if sym.type != "STT_GNU_IFUNC":
        pytest.skip(f"strlen is {sym.type} in {libc}, not an IFUNC")
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"planrunner: 1\nname: i\ntargets: {{c: {{binary: {libc}}}}}\n"
                    "probes: {len: {uprobe: c:strlen}}\noutputs: [{count: len}]\n")
    out, err = io.StringIO(), io.StringIO()
    assert main(["validate", str(plan)], out, err) == 0, err.getvalue()
    at = resolve_ifunc(libc, sym).vaddr
    assert ("    note: 'strlen' is an IFUNC: probing the implementation it resolves to on "
            "this machine, ") in out.getvalue()
    assert f"at {at:#x}\n" in out.getvalue()


def test_the_default_version_of_a_libc_symbol_is_looked_up():
    libc = _libc()
    if shutil.which("readelf") is None:
        pytest.skip("needs readelf")
    out = subprocess.run(["readelf", "--dyn-syms", "-W", libc], capture_output=True,
                         text=True, check=True).stdout
    default = re.search(r":\s+([0-9a-f]+)\s+\d+\s+\w+\s+\w+\s+\w+\s+\d+\s+realpath@@", out)
    hidden = re.search(r":\s+([0-9a-f]+)\s+\d+\s+\w+\s+\w+\s+\w+\s+\d+\s+realpath@(?!@)", out)
    if not (default and hidden):
        pytest.skip("this libc has one version of realpath")
    [sym] = lookup_symbol(libc, "realpath")
    assert sym.value == int(default.group(1), 16) != int(hidden.group(1), 16)
    assert not sym.hidden

