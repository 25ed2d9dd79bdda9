"""Every uprobe site of a binary on one uprobe_multi link (issue 23 item 6): the thunks
sit in a prog array and one link per file and kind runs the dispatcher, which
tail-calls the slot its attach cookie names (runtime/attach.py UprobeLinks).

Against the kernel, with the many_funcs fixture (mf_I called I+1 times per round): a
run holds a handful of bpf_link fds whatever its sites, every site still counts its own
calls exactly (uprobes and uretprobes), a semaphore-gated USDT probe is raised while
the run is attached and dropped after, through each load path (the compile worker's
program, the cached one, bcc's in-process load); and a 1000-site program detaches in
a fraction of the time 1000 one-site links take, measured side by side.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from planrunner.errors import BackendError
from planrunner.pipeline import compile_plan
from planrunner.runtime import features
from planrunner.runtime.attach import UprobeLinks, distinct_sites
from planrunner.runtime.bcc_backend import BccBackend
from planrunner.runtime.compile_cache import ProgramCache
from planrunner.runtime.kernel.bpf import uprobe_multi_link
from planrunner.runtime.uprobe_links import close_all
from tests.e2e.conftest import PLANRUNNER, ROOT, json_records, write_plan
from tests.e2e.executor_helpers import semaphore_value, wait_for

BINARY = "many_funcs"
GATED = "many:gated"
UPROBES, URETPROBES, ROUNDS = 64, 8, 3
IN_PROCESS = [sys.executable, "-m", "tests.e2e.in_process"]


@pytest.fixture(autouse=True)
def _links_kernel() -> None:
    if not features.detect().uprobe_multi:
        pytest.skip("this kernel has no uprobe_multi links: uprobes are perf events")


def fdinfos(pid: int, inode: str) -> Iterator[str]:
    """The fdinfo of each fd of process `pid` that is an `anon_inode:INODE`."""
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") != f"anon_inode:{inode}":
                continue
            with open(f"/proc/{pid}/fdinfo/{fd}", encoding="ascii") as fh:
                yield fh.read()
        except OSError:  # closed since the listing
            pass


def bpf_links(pid: int) -> int:
    """The uprobe links process `pid` holds (the run's own exit and exec programs are
    raw_tracepoint links: not counted)."""
    return sum("\nlink_type:\tuprobe_multi\n" in info
               or "\nlink_type:\turetprobe_multi\n" in info
               for info in fdinfos(pid, "bpf_link"))


def many_plan(tmp_path: Path, binary: Path) -> str:
    probes = "".join(f"  f{i}: {{uprobe: m:mf_{i:03d}}}\n" for i in range(UPROBES))
    probes += "".join(f"  r{i}: {{uretprobe: m:mf_{i:03d}}}\n" for i in range(URETPROBES))
    probes += f"  gated: {{usdt: m:{GATED}}}\n"
    probes += "  again: {uprobe: m:mf_001}\n"  # f1's offset too: two slots, one offset
    outputs = "".join(f"  - {{count: f{i}, name: f{i}}}\n" for i in range(UPROBES))
    outputs += "  - {count: again, name: again}\n"
    outputs += "".join(f"  - {{count: r{i}, name: r{i}}}\n" for i in range(URETPROBES))
    outputs += "  - {count: gated, name: gated}\n"
    return write_plan(tmp_path, f"planrunner: 1\nname: many\ntargets:\n"
                                f"  m: {{binary: {binary}}}\nprobes:\n{probes}"
                                f"outputs:\n{outputs}")


def start_fixture(binary: Path, n: int, rounds: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen([str(binary), str(n), str(rounds)], stdout=subprocess.PIPE,
                            text=True)
    assert wait_for(lambda: str(binary) in Path(f"/proc/{proc.pid}/maps").read_text())
    return proc


def verified_insns(pid: int) -> list[int]:
    """What the verifier walked of each BPF program process `pid` holds."""
    return [int(line.split()[1]) for info in fdinfos(pid, "bpf-prog")
            for line in info.splitlines() if line.startswith("verified_insns:")]


def traced_run(tmp_path: Path, binary: Path, entry: list[str] | None = None,
               env: dict[str, str] | None = None
               ) -> tuple[int, dict[str, int], str, list[int]]:
    """One system-wide run of many_plan while the fixture calls: the run's bpf_link fds
    once attached, each output's count, the run's stderr, and what the verifier walked
    of each of its programs."""
    fixture = start_fixture(binary, UPROBES, ROUNDS)
    try:
        tracer, said = start(many_plan(tmp_path, binary), entry or PLANRUNNER, env or {})
        try:
            links = bpf_links(tracer.pid)
            walked = verified_insns(tracer.pid)
            assert semaphore_value(fixture.pid, binary, GATED) == 1  # raised, attached
            fixture.send_signal(signal.SIGUSR1)  # the calls
            assert fixture.stdout is not None
            assert fixture.stdout.readline() == f"gated={ROUNDS} semaphore=1\n"
        finally:
            tracer.send_signal(signal.SIGINT)
            out, err = tracer.communicate(timeout=60)
        assert tracer.returncode == 0, err
        # the tracer has gone: the kernel dropped the semaphore with the link
        assert semaphore_value(fixture.pid, binary, GATED) == 0
        fixture.send_signal(signal.SIGUSR1)
        rest, _ = fixture.communicate(timeout=30)
        assert rest == "semaphore=0\n"
    finally:
        if fixture.poll() is None:
            fixture.kill()
            fixture.wait()
    counts = {r["output"]: r["count"] for r in json_records(out) if "output" in r}
    return links, counts, said + err, walked


def start(plan: str, entry: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    """`run PLAN -f json` started, once attached; what it said on stderr until then."""
    proc = subprocess.Popen([*entry, "run", plan, "-f", "json"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **env})
    assert proc.stderr is not None
    said = ""
    for line in proc.stderr:
        said += line
        if line.startswith("Tracing"):
            return proc, said
    proc.kill()
    pytest.fail(f"the run did not start: {said}{proc.communicate()[1]}")


def expected_counts() -> dict[str, int]:
    want = {f"f{i}": (i + 1) * ROUNDS for i in range(UPROBES)}
    want |= {f"r{i}": (i + 1) * ROUNDS for i in range(URETPROBES)}
    return want | {"gated": ROUNDS, "again": 2 * ROUNDS}


def test_one_link_per_binary_and_kind_every_site_counted_cold_then_warm(
        tmp_path: Path, fixtures_built: Path) -> None:
    binary = fixtures_built / BINARY
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    env = {"PLANRUNNER_CACHE_DIR": str(cache), "PLANRUNNER_CACHE_LOG": "1"}
    for run in ("cold", "warm"):
        links, counts, err, _ = traced_run(tmp_path, binary, env=env)
        assert ("planrunner: cache: hit" in err) == (run == "warm"), err
        # one link for the uprobes (and the USDT site: a uprobe of the same file), one
        # for the uretprobes; before, one per site: 74
        assert links == 2, (run, links)
        assert counts == expected_counts(), run


def test_one_link_per_binary_and_kind_with_bcc_loading_in_process(
        tmp_path: Path, fixtures_built: Path) -> None:
    links, counts, err, _ = traced_run(tmp_path, fixtures_built / BINARY, entry=IN_PROCESS)
    assert links == 2, err
    assert counts == expected_counts()


# --- stopping a 1000-site program -------------------------------------------------------

SITES = 1000


@pytest.fixture
def many_fds() -> Iterator[None]:
    soft, hard = resource_limits()
    if hard < 3 * SITES + 100:
        pytest.skip(f"RLIMIT_NOFILE's hard limit {hard} is below what {SITES} sites need")
    import resource

    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def resource_limits() -> tuple[int, int]:
    import resource

    return resource.getrlimit(resource.RLIMIT_NOFILE)


def _one_site_links_closed(binary: Path, offsets: list[int]) -> float:
    """What a stop cost before: one link per site, each with its own program, closed by
    close_all (1024 closers at once)."""
    progs, links = [], []
    try:
        for off in offsets:
            prog = features._load_nop(0)
            assert prog >= 0
            progs.append(prog)
            links.append(uprobe_multi_link(prog, str(binary), (off,), (0,), None,
                                           retprobe=False, pid=None))
        start = time.monotonic()
        close_all(links)
        links = []
        return time.monotonic() - start
    finally:
        for fd in links + progs:
            os.close(fd)


def test_a_thousand_sites_detach_in_a_fraction_of_a_thousand_links(
        tmp_path: Path, fixtures_built: Path, program_cache_dir: Path,
        many_fds: None) -> None:
    binary = fixtures_built / BINARY
    probes = "".join(f"  f{i}: {{uprobe: m:mf_{i:03d}}}\n" for i in range(SITES))
    prints = "".join(f"  - {{print: f{i}}}\n" for i in range(SITES))
    plan = write_plan(tmp_path, "planrunner: 1\nname: thousand\ntargets:\n"
                      f"  m: {{binary: {binary}}}\nprobes:\n{probes}outputs:\n{prints}")
    os.chdir(ROOT)
    _plan, _resolved, program = compile_plan(plan, {})
    sites = distinct_sites(program.sites)
    assert len(sites) == SITES
    # the program cache of the e2e session: a second session (PLANRUNNER_CACHE_DIR set)
    # skips this 1000-function compile
    with BccBackend(cache=ProgramCache(str(program_cache_dir), sys.stderr)) as backend:
        backend.load(program)
        detached = []
        for _ in range(3):
            before = bpf_links(os.getpid())
            for site in sites:
                backend.attach(site, None, True)
            backend.finish_attach()
            assert bpf_links(os.getpid()) - before == 1  # one link holds the 1000 sites
            start = time.monotonic()
            backend.detach()
            detached.append(time.monotonic() - start)
            assert bpf_links(os.getpid()) == before
    offsets = [s.file_offset for s in sites]
    per_site = statistics.median(_one_site_links_closed(binary, offsets) for _ in range(3))
    # before: the run's own stop was the 1000 one-site links (ratio ~1); now one link,
    # one round of grace periods (0.02 s against 0.19 s on a quiet machine)
    assert min(detached) < per_site / 2, (detached, per_site)


def test_an_offset_the_kernel_refuses_in_a_batch_is_named(tmp_path: Path,
                                                          fixtures_built: Path) -> None:
    """The kernel refuses a link whole, without saying which offset: the group is then
    linked site by site, and the error names the site refused (a run stops there, as
    for any site that cannot be attached: it never goes on with sites missing)."""
    binary = fixtures_built / BINARY
    probes = "".join(f"  f{i}: {{uprobe: m:mf_{i:03d}}}\n" for i in range(4))
    counts = "".join(f"  - {{count: f{i}}}\n" for i in range(4))
    os.chdir(ROOT)
    _plan, _resolved, program = compile_plan(write_plan(
        tmp_path, f"planrunner: 1\nname: bad\ntargets:\n  m: {{binary: {binary}}}\n"
                  f"probes:\n{probes}outputs:\n{counts}"), {})
    sites = list(program.sites)
    past_the_end = binary.stat().st_size + 0x1000
    sites[2] = replace(sites[2], probe="bad", file_offset=past_the_end)
    dispatcher = features._load_nop(0)
    links = UprobeLinks()
    try:
        for site in sites:
            links.add(site, None, True)
        with pytest.raises(BackendError, match=rf"could not attach probe 'bad' at "
                           rf".*many_funcs offset 0x{past_the_end:x}: Invalid argument"):
            links.attach_batched(dispatcher)
        assert bpf_links(os.getpid()) == 2  # the sites before it, one link each
    finally:
        links.detach_all()
        os.close(dispatcher)
    assert bpf_links(os.getpid()) == 0


def test_without_links_every_site_is_a_perf_event_as_before(tmp_path: Path,
                                                            fixtures_built: Path) -> None:
    """PLANRUNNER_UPROBE_ATTACH=perf (a kernel without uprobe_multi): the dispatcher is
    never loaded, each site is a perf-event uprobe of its own thunk, counts still exact."""
    links, counts, err, _ = traced_run(tmp_path, fixtures_built / BINARY,
                                       env={"PLANRUNNER_UPROBE_ATTACH": "perf"})
    assert links == 0, err
    assert counts == expected_counts()


def test_the_dispatcher_checks_the_scope_once_for_all_its_thunks(
        tmp_path: Path, fixtures_built: Path) -> None:
    """Through the dispatcher, the thunks leave the scope check (pr_skip, a few hundred
    instructions) to it (PR_DISPATCHED): the verifier walks it once, not in each of the
    74 thunks as where every thunk is attached on its own; the counts are exact both
    ways (the tests above), and test_scope_e2e.py checks the scope itself both ways."""
    linked = traced_run(tmp_path, fixtures_built / BINARY)
    alone = traced_run(tmp_path, fixtures_built / BINARY,
                       env={"PLANRUNNER_UPROBE_ATTACH": "perf"})
    assert linked[1] == alone[1] == expected_counts()
    assert len(linked[3]) == len(alone[3]) + 1, (linked[3], alone[3])  # the dispatcher
    assert 2 * sum(linked[3]) < sum(alone[3]), (linked[3], alone[3])
