"""runtime/ringbuf.py against a file laid out like a BPF ring buffer map (consumer page,
producer page, data area), written by the test as the kernel would: records come back in
order, discarded ones are skipped, a busy one stops the walk, and the consumer position
moves by whole records. And, watched from another process as the kernel watches it, the
consumer position only ever grows: CPython's struct.pack_into zeroes its target before it
writes, and a producer that reads consumer_pos == 0 in that window drops its record
(issue 7: 1-15 records lost per million at 100k/s with the ring 10% full)."""

from __future__ import annotations

import mmap
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from planrunner.runtime.ringbuf import BUSY_BIT, DISCARD_BIT, HDR_SIZE, RingReader

PAGE = mmap.PAGESIZE
ELF = Path(__file__).parents[1] / "fixtures" / "elf"


class FakeRing:
    """A ring buffer map as a file: the test produces, RingReader consumes."""

    def __init__(self, path: Path, size: int) -> None:
        self.size = size
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        os.ftruncate(self.fd, 2 * PAGE + 2 * size)
        self.map = mmap.mmap(self.fd, 2 * PAGE + 2 * size)
        self.words = memoryview(self.map).cast("Q")
        self.prod = 0

    def produce(self, sample: bytes, flags: int = 0) -> int:
        """Append one record; its header's length carries `flags` (busy, discarded)."""
        at = 2 * PAGE + (self.prod & (self.size - 1))
        self.map[at:at + 4] = (len(sample) | flags).to_bytes(4, "little")
        self.map[at + HDR_SIZE:at + HDR_SIZE + len(sample)] = sample
        pos = self.prod
        self.prod += (len(sample) + HDR_SIZE + 7) & ~7
        self.words[PAGE // 8] = self.prod  # producer_pos, one store
        return pos

    def commit(self, pos: int) -> None:
        at = 2 * PAGE + (pos & (self.size - 1))
        length = int.from_bytes(self.map[at:at + 4], "little") & ~BUSY_BIT
        self.map[at:at + 4] = length.to_bytes(4, "little")

    @property
    def consumer_pos(self) -> int:
        return self.words[0]

    def close(self) -> None:
        self.words.release()
        self.map.close()
        os.close(self.fd)


@pytest.fixture
def ring(tmp_path: Path):  # type: ignore[no-untyped-def]
    r = FakeRing(tmp_path / "ring", 1 << 16)
    yield r
    r.close()


def test_records_in_order_discarded_skipped_busy_waits(ring: FakeRing) -> None:
    reader = RingReader(ring.fd, ring.size)
    try:
        ring.produce(b"first")
        ring.produce(b"dropped", DISCARD_BIT)
        ring.produce(b"third-record")
        busy = ring.produce(b"busy", BUSY_BIT)
        ring.produce(b"after")
        assert reader.read(100) == [b"first", b"third-record"]
        assert ring.consumer_pos == busy  # released up to the record still being written
        assert reader.read(100) == []
        ring.commit(busy)
        assert reader.read(1) == [b"busy"]
        assert reader.read(100) == [b"after"]
        assert ring.consumer_pos == ring.prod
        assert reader.pending_bytes() == 0
    finally:
        reader.close()


def test_discard_counts_submitted_records_and_stops_at_a_busy_one(ring: FakeRing) -> None:
    """A stop's tail past its time: released unread, counted (discarded ones are not
    records); a record still being written stays, and is read once submitted."""
    reader = RingReader(ring.fd, ring.size)
    try:
        for i in range(5):
            ring.produce(i.to_bytes(8, "little"))
        ring.produce(b"dropped", DISCARD_BIT)
        busy = ring.produce(b"busy", BUSY_BIT)
        ring.produce(b"after")
        assert reader.discard() == 5
        assert ring.consumer_pos == busy
        ring.commit(busy)
        assert reader.discard() == 2
        assert ring.consumer_pos == ring.prod
        assert reader.discard() == 0
        assert reader.read(100) == []
    finally:
        reader.close()


def test_limit_and_wraparound_positions(ring: FakeRing) -> None:
    reader = RingReader(ring.fd, ring.size)
    try:
        got: list[bytes] = []
        for i in range(3 * ring.size // 16):  # positions pass the data size three times
            ring.produce(i.to_bytes(8, "little"))
            if i % 7 == 6:
                got += reader.read(5)
        while batch := reader.read(5):
            got += batch
        assert [int.from_bytes(b, "little") for b in got] == list(range(3 * ring.size // 16))
        assert ring.consumer_pos == ring.prod == 3 * ring.size
    finally:
        reader.close()


def test_a_read_takes_about_max_bytes_and_the_next_the_rest(ring: FakeRing) -> None:
    """Each record takes 16 bytes of ring (8 of header, 8 of sample): a read bounded to
    100 bytes takes the records starting in them (7), the next ones follow, in order."""
    reader = RingReader(ring.fd, ring.size)
    try:
        for i in range(20):
            ring.produce(i.to_bytes(8, "little"))
        first = reader.read(1000, max_bytes=100)
        assert [int.from_bytes(b, "little") for b in first] == list(range(7))
        rest: list[bytes] = []
        while batch := reader.read(1000, max_bytes=100):
            rest += batch
        assert [int.from_bytes(b, "little") for b in rest] == list(range(7, 20))
        assert ring.consumer_pos == ring.prod
    finally:
        reader.close()


def test_consumer_position_is_one_store_seen_from_another_process(
        ring: FakeRing, tmp_path: Path) -> None:
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs 2 CPUs: the watcher spins while the reader writes")
    if shutil.which("gcc") is None or shutil.which("make") is None:
        pytest.skip("needs gcc and make to build tests/fixtures/elf/watch_word.c")
    subprocess.run(["make", "-s", "-C", str(ELF), f"OUT={tmp_path}", f"{tmp_path}/watch_word"],
                   check=True)
    rounds = 200_000
    reader = RingReader(ring.fd, ring.size)
    watcher = subprocess.Popen([str(tmp_path / "watch_word"), str(tmp_path / "ring"), "0",
                                str(rounds * 16), "60000"], stdout=subprocess.PIPE, text=True)
    try:
        for i in range(rounds):  # one record per read: one consumer store per record
            ring.produce(i.to_bytes(8, "little"))
            assert len(reader.read(1)) == 1
        out, _ = watcher.communicate(timeout=60)
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
        reader.close()
    stats = dict(kv.split("=") for kv in out.split())
    assert int(stats["final"]) == rounds * 16
    assert int(stats["reads"]) > rounds  # it really watched while the reader ran
    assert stats["backwards"] == "0", out


# --- where the direct reader is used (issue 15 item 9) ------------------------------------


class _Loaded:
    """The loaded program as open_ring sees it: the events map's fd and size."""

    def map_fd(self, name: str) -> int:
        assert name == "pr_events"
        return 3

    def map_def(self, name: str) -> Any:
        return type("Def", (), {"max_entries": 1 << 16})()


@pytest.mark.parametrize("machine,env,direct", [
    ("x86_64", "", True), ("x86_64", "libbpf", False), ("aarch64", "", False),
    ("riscv64", "", False), ("ppc64le", "", False)])
def test_the_direct_reader_only_where_plain_loads_are_acquires(
        machine: str, env: str, direct: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Python has no fences: on a weakly ordered CPU the consumer could read a sample
    before its length, or free space still being copied. There libbpf's consumer (with
    smp_load_acquire/smp_store_release) reads the ring; PLANRUNNER_RING=libbpf asks for
    it anywhere."""
    from planrunner.render.model import RenderedProgram
    from planrunner.runtime import bcc_backend, ringbuf
    from planrunner.runtime.features import KernelFeatures

    opened: list[tuple[str, int]] = []
    monkeypatch.setattr(ringbuf, "_machine", lambda: machine)
    monkeypatch.setenv("PLANRUNNER_RING", env)
    monkeypatch.setattr(bcc_backend, "RingReader",
                        lambda fd, size: opened.append(("mmap", fd)) or "reader")
    monkeypatch.setattr(bcc_backend, "LibbpfRing",
                        lambda fd: opened.append(("libbpf", fd)) or "libbpf")
    backend = bcc_backend.BccBackend(KernelFeatures(True, True, True, True))
    backend.loaded = _Loaded()  # type: ignore[assignment]
    backend.program = RenderedProgram("", (), (), (), "p")
    backend.open_ring()
    assert opened == [("mmap" if direct else "libbpf", 3)]
    assert (ringbuf.ordered_host() and not env) is direct
    backend._reader = None
    backend.loaded = None


@pytest.mark.parametrize("text,count", [("0\n", 1), ("0-1\n", 2), ("0-127\n", 128),
                                        ("0-3,8-11,16\n", 9)])
def test_possible_cpus_counts_every_range(text: str, count: int, tmp_path: Path) -> None:
    from planrunner.runtime.ringbuf import possible_cpus

    (tmp_path / "possible").write_text(text)
    assert possible_cpus(str(tmp_path / "possible")) == count
