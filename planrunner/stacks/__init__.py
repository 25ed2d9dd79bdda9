"""User-space half of stacks: unwind, symbolize and print stacks that BPF captured.

Nothing here loads BPF; the capture side hands over plain values (the contract below)
and everything after that is pure Python over ELF files and /proc.

Capture contract (what the BPF program must put in the record, per event)
--------------------------------------------------------------------------
User stack, DWARF mode (`unwind: dwarf | auto`), `struct pr_ustack` (capture.py parses
it with `parse_ustack_record`; little-endian, no padding):

    u32 pid;         // tgid (bpf_get_current_pid_tgid() >> 32)
    u32 len;         // bytes actually copied into data[] (<= the plan's `bytes`)
    u64 time;        // bpf_ktime_get_ns() (CLOCK_MONOTONIC): where the event falls in
                     // the process's maps timeline (timeline.py)
    u64 regs[4];     // x86-64: ip, sp, bp, 0       (pt_regs ->ip, ->sp, ->bp)
                     // aarch64: pc, sp, x29, x30   (->pc, ->sp, ->regs[29], ->regs[30])
    [Python section] // when the probe keeps CPython frames (render/pyframes.py):
                     // u32 py_n, py_flags; struct pr_pyframe py[N] (python_frames.py)
    u8  data[len];   // bpf_probe_read_user(data, bytes, (void *)sp): the stack from sp
                     // upwards. A read past the end of the stack mapping fails as a
                     // whole, so retry shorter (halving) or copy in page-sized pieces up
                     // to the first failure, and set len to what was copied.

The user-space side needs nothing else: modules come from the process's maps at `time`
(timeline.MapsTimeline, fed with the kernel's mmap/exec/fork records) or, for a process
that was running before tracing began, from its own /proc/PID/maps snapshot
(modules.ProcessRegistry.observe(pid, start_time) as soon as a pid is seen).
Only sp, fp (and lr) are tracked: a CFA defined by any other register (gcc's stack
realignment in main via r10, signal trampolines) stops the walk; sending all general
registers would lift that, at 128 more bytes per record.
User stack, frame-pointer mode (`unwind: fp`): pid, the event's time and the u64
addresses of bpf_get_stack(ctx, buf, size, BPF_F_USER_STACK) or of a stack map
(innermost first, ip first; `size`/8 of them are valid as returned). Symbolize them
with first_is_pc=True.
Kernel stack: the u64 addresses of bpf_get_stack(ctx, buf, size, 0) (kallsyms.py).
Deduplication (a hash or a stack id) is the capture side's business: every function here
takes one stack.

Modules (one concern each)
--------------------------
capture      the contract types: ArchSpec (X86_64, AARCH64), UserRegs, StackWindow,
             UserStackCapture, parse_ustack_record
modules      /proc/PID/maps snapshots per (pid, start time), load bias, build-id; exec
             keeps the old image; refreshes rate-limited (ProcessRegistry)
timeline     every process's maps over time from mmap/exec/fork records (MapsTimeline)
vdso         the kernel's [vdso] image as a file (our own copy), for its CFI and symbols
cfi          per-module CFI (.eh_frame via .eh_frame_hdr, .debug_frame), lazy, cached
state        UnwindState / Stop / Unwound shared by the steps
unwind_dwarf one CFI step;  unwind_fp: one frame-pointer step
fp_detect    has_frame_pointers(path): the `unwind: auto` judgement
unwind       unwind(capture, modules, mode="auto"|"fp"|"dwarf", max_frames, jit) -> Unwound
symtab       per-module function symbols: .symtab/.dynsym, .gnu_debugdata, build-id file
demangle     C++ and Rust names (GNU c++filt)
symbolize    Symbolizer: addresses + snapshot -> Frames
kallsyms     kernel addresses -> Frames
frame        Frame(address, symbol, offset, module; the mapping, not compared)
lines        a module's DWARF line table: link-time address -> (file, line), for pprof
formats      JSON dicts, `trace -U` text lines, folded stacks
flamegraph   render_flamegraph(folded_lines, title) -> interactive SVG
python_versions  which CPython an executable is; its structure offsets (per version)
python_frames    the Python section -> Frames (lines from co_linetable), merged in place
                 of the interpreter loop's native frames
perfmap      JIT symbols from /tmp/perf-PID.map (Node, Java, CPython 3.12 -X perf), read
             through /proc/PID/root, incrementally, bounded (PerfMaps: per process)
unwind_jit   the step through JIT code: frame pointers (CPython trampolines: a fixed
             two-word step), after which unwind() goes on with CFI
"""
