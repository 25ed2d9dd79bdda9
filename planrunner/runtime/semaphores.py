"""USDT semaphores: the kernel's reference counter, or raising them by hand with --pid.

Mode (`semaphore_mode()`): "refctr" when the kernel has uprobe reference counters
(KernelFeatures.ref_ctr, runtime/features.py): every uprobe is attached
with its site's semaphore offset and the kernel raises and drops the count in every
process mapping the binary. "poke" otherwise, or when PLANRUNNER_SEMAPHORE_MODE=poke
(a switch for tests, README "Environment variables"): uprobes are attached with
ref_ctr_offset 0 and `Poker` adds 1 to each site's semaphore in the --pid process
through /proc/PID/mem, then takes it back on exit.

Poke safety:
- pid reuse: the process's start time (/proc/PID/stat field 22) is taken when a
  semaphore is raised and checked again, after /proc/PID/mem is opened, before every
  later write; an open mem file stays bound to that process's memory.
- exec: an exec() keeps the pid and the start time but replaces the memory, so two
  things are recorded when the semaphore is raised (in `Raised` and the state file)
  and checked before every write, raise and restore alike, after /proc/PID/mem is
  opened (a mem file opened before an exec writes to the old memory, which is gone):
  the identity of the mapping at the address (device, inode, offset in the file:
  `Mapping`, from /proc/PID/maps), and the exec generation (`exec_generation`), for
  a program that exec()s itself: a non-PIE one has the same semaphore at the same
  address in the new image, where run 1's restore would cancel run 2's raise. A
  mismatch of either, or an entry recorded without them, is left alone.
  The generation is the 16 bytes at AT_RANDOM (/proc/PID/auxv), which the kernel fills
  from its random pool at every ELF exec (binfmt_elf's create_elf_tables), whatever
  ASLR says, read through the very mem file that writes: equal bytes mean that file's
  memory is the image the semaphore was raised in. Not the start time (an exec keeps
  it), nor an address the exec randomizes (the stack's, the vdso's: the same in every
  image when ASLR is off, as under `setarch -R` or gdb), nor the kernel's exec records
  (runtime/task_events.py: only while stacks are followed). A program that overwrote
  those bytes (glibc only reads them, for its stack guard) reads as another image: its
  semaphore stays raised, which only costs a little.
- crashes: what was raised is recorded in a state file (STATE_DIRS) written after
  the memory, so a crash between the two leaves a count raised (harmless: the probe
  only costs a little) rather than lowering a count someone else raised. A later run
  (`recover_stale()`) undoes the entries of state files whose planrunner is gone.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from planrunner.elf.procmaps import MappedObject, read_maps, start_time
from planrunner.errors import PlanError
from planrunner.runtime.features import KernelFeatures, kernel_has_ref_ctr

MODE_ENV = "PLANRUNNER_SEMAPHORE_MODE"
_U16 = struct.Struct("<H")
_AUXV = struct.Struct("<QQ")  # (type, value), native words of a 64-bit process
AT_RANDOM = 25  # include/uapi/linux/auxvec.h: the address of 16 random bytes


def semaphore_mode(features: KernelFeatures | None = None) -> str:
    """"refctr" or "poke" (see the module docstring); without `features`, the sysfs
    file is checked directly."""
    forced = os.environ.get(MODE_ENV, "").strip().lower()
    if forced in ("poke", "refctr"):
        return forced
    has = features.ref_ctr if features is not None else kernel_has_ref_ctr()
    return "refctr" if has else "poke"


def state_dir(create: bool = True) -> str:
    """/run/planrunner as root, else $XDG_RUNTIME_DIR/planrunner (created 0700)."""
    base = "/run" if os.geteuid() == 0 or not os.environ.get("XDG_RUNTIME_DIR") else \
        os.environ["XDG_RUNTIME_DIR"]
    path = os.path.join(base, "planrunner")
    if create:
        os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def runtime_address(maps: Iterable[MappedObject], dev_ino: tuple[int, int],
                     file_offset: int) -> int | None:
    """Where byte `file_offset` of the file (st_dev, st_ino) is mapped, or None."""
    dev, ino = dev_ino
    want_dev = f"{os.major(dev):02x}:{os.minor(dev):02x}"
    for m in maps:
        if m.inode != ino or m.dev != want_dev:
            continue
        if m.offset <= file_offset < m.offset + (m.end - m.start):
            return m.start + file_offset - m.offset
    return None


# (device "major:minor" as /proc/PID/maps prints it, inode, offset in the file) of the
# byte at an address: which file's which byte is there.
Mapping = tuple[str, int, int]


def mapping_at(maps: Iterable[MappedObject], addr: int) -> Mapping | None:
    """The identity of the file byte mapped at `addr` (None: not mapped, or anonymous)."""
    for m in maps:
        if m.start <= addr < m.end:
            if not m.inode:
                return None
            return (m.dev, m.inode, m.offset + addr - m.start)
    return None


def _mapping_now(pid: int, addr: int) -> Mapping | None:
    try:
        return mapping_at(read_maps(pid), addr)
    except PlanError:
        return None


def _at_random(pid: int) -> int | None:
    """The address of the 16 bytes AT_RANDOM names in `pid`'s current image."""
    try:
        with open(f"/proc/{pid}/auxv", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    for kind, value in _AUXV.iter_unpack(data[:len(data) - len(data) % _AUXV.size]):
        if kind == AT_RANDOM:
            return int(value)
    return None


def exec_generation(pid: int, mem_fd: int | None = None) -> str | None:
    """Which exec of `pid` this is (see the module docstring), as hex; read through
    `mem_fd` (an open /proc/PID/mem: the image that fd is bound to) when given. None:
    unreadable."""
    addr = _at_random(pid)
    if addr is None:
        return None
    try:
        if mem_fd is not None:
            data = os.pread(mem_fd, 16, addr)
        else:
            with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
                mem.seek(addr)
                data = mem.read(16)
    except (OSError, ValueError):
        return None
    return data.hex() if len(data) == 16 else None


@dataclass(frozen=True, slots=True)
class Raised:
    """One semaphore planrunner added 1 to."""

    pid: int
    start: int  # the process's start time when raised
    addr: int
    mapping: Mapping | None = None  # what was mapped at addr when raised (None: unknown)
    generation: str | None = None  # exec_generation when raised (None: unknown)


class SemaphoreError(PlanError):
    """A semaphore could not be raised (process gone, memory not writable)."""


def _add(pid: int, start: int, addr: int, delta: int, mapping: Mapping | None,
         generation: str | None) -> int | None:
    """Add delta to the u16 at addr in pid (clamped at 0 and 0xffff); the new value, or
    None when the process is no longer the one that was started at `start`, or has
    exec()ed since (`generation`: even the same program), or `addr` no longer maps the
    same byte of the same file (`mapping`: the file was unmapped), or `mapping` or
    `generation` is None (unknown: never written)."""
    if mapping is None or generation is None:
        return None
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_RDWR)
    except OSError:
        return None
    try:
        if start_time(pid) != start:  # the pid was reused: not our process
            return None
        if exec_generation(pid, fd) != generation:  # this fd's memory is another exec's
            return None
        # After the open: an exec() from now on leaves this fd on the old, dead memory.
        if _mapping_now(pid, addr) != mapping:  # another program (exec) or file there
            return None
        value = int(_U16.unpack(os.pread(fd, 2, addr))[0])
        new = max(0, min(0xFFFF, value + delta))
        os.pwrite(fd, _U16.pack(new), addr)
        return new
    except (OSError, struct.error):
        return None
    finally:
        os.close(fd)


def read_semaphore(pid: int, addr: int) -> int | None:
    try:
        with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
            mem.seek(addr)
            return int(_U16.unpack(mem.read(2))[0])
    except (OSError, struct.error, ValueError):
        return None


class Poker:
    """Raises semaphores in one process by hand and restores them (poke mode)."""

    def __init__(self, pid: int, directory: str | None = None) -> None:
        self.pid = pid
        self.start = start_time(pid)
        self.raised: list[Raised] = []
        self._dir = directory or state_dir()
        self.state_path = os.path.join(self._dir, f"semaphores-{os.getpid()}.json")

    def raise_sites(self, sites: Iterable[tuple[tuple[int, int], int]]) -> int:
        """Add 1 to each distinct semaphore ((st_dev, st_ino), file offset) that is mapped
        in the process now and not yet raised. Returns how many were raised."""
        if self.start is None:
            return 0
        maps = read_maps(self.pid)
        done = {r.addr for r in self.raised}
        count = 0
        for dev_ino, offset in sites:
            addr = runtime_address(maps, dev_ino, offset)
            if addr is None or addr in done:
                continue
            mapping = mapping_at(maps, addr)
            generation = exec_generation(self.pid)
            if _add(self.pid, self.start, addr, +1, mapping, generation) is None:
                raise SemaphoreError(
                    f"cannot raise the semaphore at {addr:#x} in process {self.pid}",
                    hints=("the process exited, or /proc/PID/mem is not writable "
                           "(ptrace restrictions)",))
            self.raised.append(Raised(self.pid, self.start, addr, mapping, generation))
            done.add(addr)
            count += 1
            self._save()  # after the write: a crash in between leaks, never undercounts
        return count

    def restore(self) -> None:
        """Take back every +1 (skipped when the pid now belongs to another process, or
        has exec()ed since, or another file is mapped at the address)."""
        while self.raised:
            r = self.raised.pop()
            _add(r.pid, r.start, r.addr, -1, r.mapping, r.generation)
            self._save()

    def _save(self) -> None:
        if not self.raised:
            try:
                os.unlink(self.state_path)
            except FileNotFoundError:
                pass
            return
        data = {"owner": os.getpid(), "owner_start": start_time(os.getpid()),
                "raised": [asdict(r) for r in self.raised]}
        tmp = self.state_path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        os.replace(tmp, self.state_path)


def recover_stale(directory: str | None = None) -> int:
    """Undo what crashed planrunner runs left raised (their state files). Returns the
    number of semaphores lowered."""
    try:
        directory = directory or state_dir(create=False)
        names = os.listdir(directory)
    except OSError:
        return 0
    lowered = 0
    for name in names:
        if not (name.startswith("semaphores-") and name.endswith(".json")):
            continue
        path = os.path.join(directory, name)
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
            owner, owner_start = int(data["owner"]), data.get("owner_start")
            entries = [Raised(int(r["pid"]), int(r["start"]), int(r["addr"]),
                              _mapping_of(r.get("mapping")),
                              _generation_of(r.get("generation")))
                       for r in data["raised"]]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if owner != os.getpid() and start_time(owner) == owner_start:
            continue  # that run is alive: its semaphores are its own to restore
        for r in entries:
            if _add(r.pid, r.start, r.addr, -1, r.mapping, r.generation) is not None:
                lowered += 1
        try:
            os.unlink(path)
        except OSError:
            pass
    return lowered


def _mapping_of(value: object) -> Mapping | None:
    """A state file's [dev, inode, offset] (None: absent, as in older files)."""
    if not isinstance(value, list) or len(value) != 3:
        return None
    dev, ino, off = value
    return (str(dev), int(ino), int(off))


def _generation_of(value: object) -> str | None:
    """A state file's generation (None: absent, as in older files)."""
    return value if isinstance(value, str) else None
