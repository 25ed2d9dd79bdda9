/* Helpers every plan program uses (included verbatim by program.bpf.c.j2).
   The string readers are compiled only when the program defines their PR_USE_ macro
   (render/program.py does, for what its statements call): clang pays for unused ones.
   The constants and structs it shares with the Python (PR_STR_*, PR_CFG_*, PR_SCOPE_*,
   PR_BORN_*, struct pr_tracer_table, pr_comm, pr_cgroup...) come before it, generated
   from render/contracts.py: none is defined here. */

/* The user-memory readers, called by helper number. bcc rewrites every call spelled
   bpf_probe_read_user(_str) after looking the helper up in /proc/kallsyms, afresh for
   each call, to fall back to bpf_probe_read before Linux 5.5: ~20 ms of compile per
   call site here. The ring buffer needs 5.8, so that lookup can only say yes. */
static long (*pr_probe_read_user)(void *dst, __u32 size, const void *src) =
    (void *)BPF_FUNC_probe_read_user;
static long (*pr_probe_read_user_str)(void *dst, __u32 size, const void *src) =
    (void *)BPF_FUNC_probe_read_user_str;
#define bpf_probe_read_user pr_probe_read_user
#define bpf_probe_read_user_str pr_probe_read_user_str

/* Reads that may fault a page in. bpf_probe_read_user(_str) cannot: a page the process
   has not touched yet (a library's .rodata right after dlopen) reads as an error. A probe
   that reads user strings passes PR_FAULT to the readers below (render/bodies.py); where
   the kernel has sleepable uprobes the loader defines PR_SLEEPABLE and loads that probe
   BPF_F_SLEEPABLE (render/model.py AttachSite.sleepable), and the page is faulted in as
   the process itself would on reading it. Without PR_SLEEPABLE these are the non-faulting
   readers, and the runtime re-reads what failed from /proc/PID/mem (marked "reread"). */
#define PR_NOFAULT 0
#define PR_FAULT 1
#ifdef PR_SLEEPABLE
/* The non-faulting read first (the common case: the page is there); on an error, touch
   the pages the string may lie on one by one, with bpf_copy_from_user (which faults them
   in), reading again after each: at most cap / PAGE_SIZE + 2 pages. The kfunc
   bpf_copy_from_user_str (6.12+) would do it in one call, but bcc 0.26 refuses calls to
   extern functions. */
static __always_inline long pr_user_str_f(void *dst, __u32 cap, const void *src)
{
    long n = bpf_probe_read_user_str(dst, cap, src);
    __u64 page = (__u64)src;
    char c;
    for (__u32 i = 0; n < 0 && i < cap / PAGE_SIZE + 2; i++) {
        if (bpf_copy_from_user(&c, 1, (void *)page) < 0)
            break;  /* not mapped: nothing to fault in */
        n = bpf_probe_read_user_str(dst, cap, src);
        page = (page | (PAGE_SIZE - 1)) + 1;
    }
    return n;
}
#define pr_user_bytes_f bpf_copy_from_user
/* A sleepable probe's scratch is task storage: another task may run the probe on this
   CPU while it waits for a page, so the scratch is the task's own. bcc creates a task
   storage map only with the program's BTF, made from debug info that costs a compile
   12-14% more; so bcc is given a hash of the same key and value, which it creates
   without, and planrunner's loader creates the map as task storage
   (RenderedProgram.task_storage_maps, runtime/bcc_backend.py _capture). Its
   .task_storage_get() is bpf_task_storage_get on the map, which the verifier checks
   is task storage. */
#define PR_TASK_STORAGE(_name, _leaf_type) \
    BPF_F_TABLE("hash", int, _leaf_type, _name, 1, BPF_F_NO_PREALLOC)
#else
#define pr_user_str_f bpf_probe_read_user_str
#define pr_user_bytes_f bpf_probe_read_user
#endif

/* Filled by the runtime after loading (render/contracts.py ConfigSlot; runtime/scope.py).
   [PR_CFG_SCOPE_UPROBE] and [PR_CFG_SCOPE_TRACEPOINT]: the scope filters (PR_SCOPE_*
   bits) each kind of thunk applies here; one --pid alone is 0 for uprobes, which the
   kernel filters at attach. [PR_CFG_SELF]: planrunner's own process, whose events are
   dropped (tracing the Python that runs planrunner would feed on itself).
   [PR_CFG_NS_DEV], [PR_CFG_NS_INO]: planrunner's pid namespace when it is not the init
   one (0: it is), so that SELF and the --pid values, which are pids of that namespace,
   are compared with the task's tgid there. [PR_CFG_CGROUPS]: entries of pr_scope_cgroups
   in use. [PR_CFG_NR_CPUS]: the possible CPUs, which scale the ring buffer's wakeup
   watermark (record_helpers.h). [PR_CFG_COMMAND]: the -c command (a pid of SELF's
   namespace) while it is still a copy of planrunner, between its fork and its exec:
   skipped like SELF, set to 0 by pr_on_exec when the exec has succeeded. */
BPF_ARRAY(pr_config, __u32, PR_CFG_SLOTS);

/* PR_SCOPE_PIDS, _COMM, _CGROUP: the filters a scope slot turns on. pr_scope_pids maps
   a tgid, or a pid of planrunner's namespace ORed with PR_NS_KEY, to PR_SCOPE_GIVEN (a
   --pid or the -c command) or PR_SCOPE_CHILD (a descendant added by pr_scope_fork). */
#define PR_CLONE_THREAD 0x00010000

/* Every planrunner process on the machine (init-namespace tgids; 0: a free slot), shared
   by all runs through the pin: two system-wide runs must not trace each other. Each
   run adds itself before compiling (runtime/tracers.py); pr_on_exit removes it. One
   array element scanned in registers: a hash lookup per event cost 14 ns more. The
   loader moves the pin (-DPR_TRACERS_PIN) when another user squatted the default. */
BPF_TABLE_PINNED("array", __u32, struct pr_tracer_table, pr_tracers, 1, PR_TRACERS_PIN);
/* planrunner processes that began while this run was attached and have not yet
   registered in pr_tracers (they do once their Python runs, too late for the
   interpreter's own start): tgid -> PR_BORN_*. pr_born_n counts the entries, so that
   pr_skip looks the hash up only while there is one. PR_BORN_EXEC: exec'd as
   planrunner (pr_on_exec); PR_BORN_FORK: forked by a planrunner process, until it execs. */
BPF_HASH(pr_born, __u32, __u32, 1024);
BPF_ARRAY(pr_born_n, __u64, 1);
/* tid -> 1: the execve it is in names planrunner in its argv (pr_on_execve) */
BPF_HASH(pr_exec_argv, __u32, __u32, 1024);
/* --pid values, the -c command and, with --follow-children, their descendants */
BPF_HASH(pr_scope_pids, __u32, __u32, 16384);
BPF_HASH(pr_scope_comms, struct pr_comm, __u32, 64);
/* --cgroup directories as (cgroup id, depth below the v2 root): the task is in one, or
   below it, when its ancestor at that depth is that cgroup. Not a BPF_CGROUP_ARRAY:
   sleepable programs (runtime/progload.py) may not use one. */
BPF_ARRAY(pr_scope_cgroups, struct pr_cgroup, PR_MAX_CGROUPS);
static u64 (*pr_ancestor_cgroup_id)(int level) =
    (void *)BPF_FUNC_get_current_ancestor_cgroup_id;

static __always_inline __u32 pr_cfg(__u32 slot)
{
    __u32 *v = pr_config.lookup(&slot);
    return v ? *v : 0;
}

/* The current tgid in planrunner's pid namespace; 0 for a task outside it. */
static __always_inline __u32 pr_ns_tgid(__u32 ino)
{
    struct bpf_pidns_info ns = {};
    if (bpf_get_ns_current_pid_tgid(pr_cfg(PR_CFG_NS_DEV), ino, &ns, sizeof(ns)))
        return 0;
    return ns.tgid;
}

static __always_inline int pr_is_tracer(__u32 tgid)
{
    __u32 zero = 0;
    struct pr_tracer_table *t = pr_tracers.lookup(&zero);
    if (!t || !tgid)
        return 0;
#pragma unroll
    for (int i = 0; i < PR_MAX_TRACERS; i++)
        if (t->tgid[i] == tgid)
            return 1;
    return 0;
}

static __always_inline int pr_is_born(__u32 tgid)
{
    __u32 zero = 0;
    __u64 *n = pr_born_n.lookup(&zero);
    return n && *n && pr_born.lookup(&tgid);
}

static __always_inline void pr_born_add(__u32 tgid, __u32 how)
{
    __u32 zero = 0;
    __u64 *n = pr_born_n.lookup(&zero);
    __u32 *was = pr_born.lookup(&tgid);
    if (was) {
        *was = how;
    } else if (n && pr_born.insert(&tgid, &how) == 0) {
        __sync_fetch_and_add(n, 1);
    }
}

static __always_inline void pr_born_remove(__u32 tgid)
{
    __u32 zero = 0;
    __u64 *n = pr_born_n.lookup(&zero);
    if (n && pr_born.delete(&tgid) == 0)
        __sync_fetch_and_add(n, -1);
}

static __always_inline int pr_pid_allowed(__u32 tgid, __u32 ns_tgid)
{
    if (pr_scope_pids.lookup(&tgid))
        return 1;
    __u32 key = ns_tgid | PR_NS_KEY;
    return ns_tgid && pr_scope_pids.lookup(&key);
}

/* The current thread's comm into dst[16] (8-byte aligned), as bpf_get_current_comm
   gives it. Where the kernel has BTF the loader defines PR_TASK_COMM_OFFSET
   (task_struct.comm; render/program.py TASK_COMM_OFFSET) and it is two plain loads from
   the task, which the verifier checks against the kernel's BTF: no helper call (that
   one costs ~40 ns on an AMD EPYC guest, BENCHMARKS.md issue 28 item 1). The kernel
   keeps comm NUL-terminated and zero-padded (__set_task_comm), so the bytes are the
   helper's. Without BTF, the helper. */
static __always_inline void pr_current_comm(char *dst)
{
#ifdef PR_TASK_COMM_OFFSET
    const char *task = (const char *)bpf_get_current_task_btf();
    ((__u64 *)dst)[0] = *(const __u64 *)(task + PR_TASK_COMM_OFFSET);
    ((__u64 *)dst)[1] = *(const __u64 *)(task + PR_TASK_COMM_OFFSET + 8);
#else
    bpf_get_current_comm(dst, 16);
#endif
}

/* 1 when this event is not to be recorded: any planrunner's own, or outside the scope
   the thunk's kind applies (AND across --pid, --comm, --cgroup; OR within each). `id`:
   bpf_get_current_pid_tgid(), read once per event by the thunk, which hands it to the
   body too (~8 ns a call on an AMD EPYC guest). */
static __always_inline int pr_skip(__u32 scope_slot, __u64 id)
{
    __u32 tgid = id >> 32;
    if (pr_is_tracer(tgid) || pr_is_born(tgid))
        return 1;
    __u32 ino = pr_cfg(PR_CFG_NS_INO);
    __u32 ns_tgid = ino ? pr_ns_tgid(ino) : 0;
    __u32 me = ino ? ns_tgid : tgid;
    if (me == pr_cfg(PR_CFG_SELF))
        return 1;
    __u32 command = pr_cfg(PR_CFG_COMMAND);
    if (command && me == command)
        return 1;
    __u32 scope = pr_cfg(scope_slot);
    if (!scope)
        return 0;
    if ((scope & PR_SCOPE_PIDS) && !pr_pid_allowed(tgid, ns_tgid))
        return 1;
    if (scope & PR_SCOPE_COMM) {
        struct pr_comm comm __attribute__((aligned(8)));
        pr_current_comm(comm.c);
        if (!pr_scope_comms.lookup(&comm))
            return 1;
    }
    if (scope & PR_SCOPE_CGROUP) {
        __u32 n = pr_cfg(PR_CFG_CGROUPS);
        int in = 0;
        /* kept a loop (bounded: Linux 5.3; the ring buffer needs 5.8): unrolled, its
           8 turns were ~95 of this check's ~315 instructions, compiled into every thunk
           that makes it (a sleepable one), and they run only with --cgroup */
#pragma clang loop unroll(disable)
        for (__u32 i = 0; i < PR_MAX_CGROUPS; i++) {
            if (i < n) {
                __u32 k = i;
                struct pr_cgroup *c = pr_scope_cgroups.lookup(&k);
                if (c && pr_ancestor_cgroup_id((int)c->level) == c->id) {
                    in = 1;
                    break;
                }
            }
        }
        if (!in)
            return 1;
    }
    return 0;
}

/* --follow-children (attached only then): a process forked by an allowed one is
   allowed too. task:task_newtask runs in the parent, with the child's pid and clone
   flags (threads share their tgid: nothing to add). Coupled with the tracepoint's
   format: pid at offset 8, clone_flags at 32. */
struct pr_newtask {
    __u64 pr_common;
    __s32 pid;
    char comm[16];
    __u32 pr_pad;
    __u64 clone_flags;
};

static __always_inline int pr_scope_forked(__u32 child, __u64 clone_flags)
{
    if (clone_flags & PR_CLONE_THREAD)
        return 0;
    __u32 tgid = bpf_get_current_pid_tgid() >> 32;
    __u32 ino = pr_cfg(PR_CFG_NS_INO);
    if (!pr_pid_allowed(tgid, ino ? pr_ns_tgid(ino) : 0))
        return 0;
    __u32 how = PR_SCOPE_CHILD;
    pr_scope_pids.update(&child, &how);
    return 0;
}

/* Each own program is compiled only where the run attaches it (runtime/scope.py
   own_sites, by the same rule): the perf-event variant without the kernel's offsets or
   where the plan shares the event (PR_SHARED_*, render/model.py), else the raw one. */
#if !defined(PR_TASK_TGID_OFFSET) || defined(PR_SHARED_FORK)
int pr_scope_fork(struct pr_newtask *args)
{
    return pr_scope_forked(args->pid, args->clone_flags);
}
#endif

/* At every fork (attached always): the child of a planrunner process is one too, until
   it execs (the -c command of another run before its exec, the compile worker before
   Python starts). Coupled with struct pr_newtask (above). */
static __always_inline int pr_forked(__u32 child, __u64 clone_flags)
{
    if (clone_flags & PR_CLONE_THREAD)
        return 0;
    __u32 tgid = bpf_get_current_pid_tgid() >> 32;
    if (pr_is_tracer(tgid) || pr_is_born(tgid))
        pr_born_add(child, PR_BORN_FORK);
    return 0;
}

#if !defined(PR_TASK_TGID_OFFSET) || defined(PR_SHARED_FORK)
int pr_on_fork(struct pr_newtask *args)
{
    return pr_forked(args->pid, args->clone_flags);
}
#endif

/* The raw tracepoint variants of the two above, compiled only where the loader
   defines the kernel's struct offsets (render/model.py OWN_BTF_MEMBERS, from its BTF):
   a raw tracepoint's close at the stop waits for no grace period. TP_PROTO(struct
   task_struct *task, u64 clone_flags): the child's pid is its task's tgid (a process:
   threads return above). */
#ifdef PR_TASK_TGID_OFFSET
static __always_inline __u32 pr_task_tgid(__u64 task)
{
    __u32 tgid = 0;
    bpf_probe_read_kernel(&tgid, sizeof(tgid), (void *)(task + PR_TASK_TGID_OFFSET));
    return tgid;
}

#ifndef PR_SHARED_FORK
int pr_scope_fork_raw(struct bpf_raw_tracepoint_args *ctx)
{
    if (ctx->args[1] & PR_CLONE_THREAD)
        return 0;
    return pr_scope_forked(pr_task_tgid(ctx->args[0]), ctx->args[1]);
}

int pr_on_fork_raw(struct bpf_raw_tracepoint_args *ctx)
{
    if (ctx->args[1] & PR_CLONE_THREAD)
        return 0;
    return pr_forked(pr_task_tgid(ctx->args[0]), ctx->args[1]);
}
#endif
#endif

/* Whether s (16 bytes readable) holds planrunner or planrunner.MODULE: what follows -m in
   `python3 -m planrunner`, or -X in the compile worker's `python3 -Xplanrunner`. Byte
   by byte: a C string literal would land in an unrelocated .rodata. */
static __always_inline int pr_names_planrunner(const char *s)
{
    return s[0] == 'p' && s[1] == 'l' && s[2] == 'a' && s[3] == 'n' && s[4] == 'r' &&
           s[5] == 'u' && s[6] == 'n' && s[7] == 'n' && s[8] == 'e' && s[9] == 'r' &&
           (s[10] == 0 || s[10] == '.');
}

/* Whether argv[1..4] (argv: the user address of the pointer array) say planrunner
   (`-m planrunner`, `-mplanrunner`, `-Xplanrunner`). */
static __always_inline int pr_argv_names_planrunner(__u64 argv)
{
    int after_m = 0;
#pragma unroll
    for (int i = 1; i < 5; i++) {
        __u64 p = 0;
        char s[16] = {};
        if (bpf_probe_read_user(&p, sizeof(p), (void *)(argv + 8 * i)) || !p)
            break;
        if (bpf_probe_read_user_str(s, 14, (void *)p) <= 0)
            break;
        if ((after_m && pr_names_planrunner(s)) ||
            (s[0] == '-' && (s[1] == 'm' || s[1] == 'X') && pr_names_planrunner(s + 2)))
            return 1;
        after_m = s[0] == '-' && s[1] == 'm' && s[2] == 0;
    }
    return 0;
}

/* At every execve (attached only without the kernel's struct offsets, see pr_exec_own_argv
   below), in the process that calls it: whether its argv says planrunner, for
   pr_on_exec, which runs in the new program. A failed exec leaves its entry to the
   thread's next one. */
static __always_inline int pr_note_exec(__u64 argv)
{
    __u32 tid = (__u32)bpf_get_current_pid_tgid();
    if (pr_argv_names_planrunner(argv)) {
        __u32 one = 1;
        pr_exec_argv.update(&tid, &one);
    } else {
        pr_exec_argv.delete(&tid);
    }
    return 0;
}

/* syscalls:sys_enter_execve and sys_enter_execveat: the argv pointer at offset 24 and
   32 of their formats */
struct pr_execve {
    __u64 pr_common;
    __u64 nr;
    __u64 filename;
    __u64 argv;
};
struct pr_execveat {
    __u64 pr_common;
    __u64 nr;
    __u64 fd;
    __u64 filename;
    __u64 argv;
};

#ifndef PR_MM_START_STACK_OFFSET  /* else the exec program reads argv itself */
int pr_on_execve(struct pr_execve *args)
{
    return pr_note_exec(args->argv);
}

int pr_on_execveat(struct pr_execveat *args)
{
    return pr_note_exec(args->argv);
}
#endif

/* sched:sched_process_exec, in the new program before its first instruction (attached
   always). The -c command is the command from now on (PR_CFG_COMMAND cleared); a
   process that starts planrunner (its comm, the script's name, is "planrunner", or a
   python's argv said so: `named`) is skipped from here on, long before it registers
   itself; a fork of planrunner that runs another program is no longer one. Four
   entries (render/model.py OWN_RAW_VARIANTS, OWN_BTF_VARIANTS): a raw tracepoint,
   whose close at the stop waits for no grace period, and the tracepoint perf event,
   used when the plan has a tracepoint on the same event (then ours runs first, in
   attach order, as the plan's expects; a raw one's place among the event's probes
   depends on what else is attached); each either reading the new program's argv
   itself (with the kernel's struct offsets) or told by pr_on_execve(at). */
static __always_inline int pr_exec_seen(int named)
{
    __u32 tgid = bpf_get_current_pid_tgid() >> 32;
    __u32 slot = PR_CFG_COMMAND;
    __u32 *command = pr_config.lookup(&slot);
    if (command && *command) {
        __u32 ino = pr_cfg(PR_CFG_NS_INO);
        if ((ino ? pr_ns_tgid(ino) : tgid) == *command)
            *command = 0;
    }
    struct pr_comm comm = {};
    bpf_get_current_comm(&comm, sizeof(comm));
    const char *c = comm.c;
    int python = c[0] == 'p' && c[1] == 'y' && c[2] == 't' && c[3] == 'h' &&
                 c[4] == 'o' && c[5] == 'n';
    if (pr_names_planrunner(c) || (named && python))
        pr_born_add(tgid, PR_BORN_EXEC);
    else
        pr_born_remove(tgid);
    return 0;
}

/* What pr_on_execve(at) noted for `old`: old_pid, the tid that called execve. */
static __always_inline int pr_exec_noted(__u32 old)
{
    int named = pr_exec_argv.lookup(&old) != 0;
    if (named)
        pr_exec_argv.delete(&old);
    return named;
}

/* TP_PROTO(struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm) */
#if !defined(PR_MM_START_STACK_OFFSET) && !defined(PR_SHARED_EXEC)
int pr_on_exec_raw(struct bpf_raw_tracepoint_args *ctx)
{
    return pr_exec_seen(pr_exec_noted((__u32)ctx->args[1]));
}
#endif

/* The format: old_pid at offset 16. */
struct pr_exec {
    __u64 pr_common;
    __u32 filename_loc;
    __s32 pid;
    __s32 old_pid;
};

#if !defined(PR_MM_START_STACK_OFFSET) && defined(PR_SHARED_EXEC)
int pr_on_exec(struct pr_exec *args)
{
    return pr_exec_seen(pr_exec_noted(args->old_pid));
}
#endif

#ifdef PR_MM_START_STACK_OFFSET
/* The new program's own argv, read where the exec has just laid it out: the ELF
   loader leaves mm->start_stack at argc, the argv pointers after it (the process's
   initial stack; the pages were written by the exec, so present). No execve program
   and no map entry between the two events. */
static __always_inline int pr_exec_own_argv(void)
{
    __u64 task = bpf_get_current_task();
    __u64 mm = 0, stack = 0;
    if (bpf_probe_read_kernel(&mm, 8, (void *)(task + PR_TASK_MM_OFFSET)) || !mm)
        return 0;
    if (bpf_probe_read_kernel(&stack, 8, (void *)(mm + PR_MM_START_STACK_OFFSET)) || !stack)
        return 0;
    return pr_argv_names_planrunner(stack + 8);
}

#ifndef PR_SHARED_EXEC
int pr_on_exec_argv_raw(struct bpf_raw_tracepoint_args *ctx)
{
    return pr_exec_seen(pr_exec_own_argv());
}
#else
int pr_on_exec_argv(void *ctx)
{
    return pr_exec_seen(pr_exec_own_argv());
}
#endif
#endif

/* At every process exit (attached always): a planrunner leaves the registry only now,
   since its interpreter runs until then (the run that ends while no other is attached
   leaves a dead entry, which the next run's registration removes); a descendant added
   by --follow-children leaves the scope (its pid may be reused). Two entries, as for
   exec (above); neither reads its context. */
static __always_inline int pr_exit_seen(void)
{
    __u64 id = bpf_get_current_pid_tgid();
    __u32 tgid = id >> 32;
    if ((__u32)id != tgid)
        return 0; /* a thread, not the process */
    __u32 zero = 0;
    struct pr_tracer_table *t = pr_tracers.lookup(&zero);
    if (t) {
#pragma unroll
        for (int i = 0; i < PR_MAX_TRACERS; i++)
            if (t->tgid[i] == tgid)
                t->tgid[i] = 0;
    }
    pr_born_remove(tgid);
    __u32 *how = pr_scope_pids.lookup(&tgid);
    if (how && *how == PR_SCOPE_CHILD)
        pr_scope_pids.delete(&tgid);
    return 0;
}

#ifdef PR_SHARED_EXIT
int pr_on_exit(void *ctx)
{
    return pr_exit_seen();
}
#else
int pr_on_exit_raw(void *ctx)
{
    return pr_exit_seen();
}
#endif

/* The string readers below also store in *len the bytes the string takes in buf, its
   NUL included (1 when nothing was read): a record that ends with the string reserves
   no more than that (render/layout.py RecordLayout.variable). */
#ifdef PR_USE_READ_STR
/* Read a NUL-terminated user string into buf[cap] (content <= cap-1 bytes).
   Returns a status: PR_STR_NULL for a NULL pointer, -errno when unreadable (the
   consumer retries from user space), PR_STR_TRUNCATED when more bytes followed.
   `fault`: PR_FAULT in a probe that may be loaded sleepable, else PR_NOFAULT. */
static __always_inline __s64 pr_read_str(char *buf, __u32 cap, __u64 ptr, int fault,
                                         __u32 *len)
{
    *len = 1;
    if (!ptr) {
        buf[0] = 0;
        return PR_STR_NULL;
    }
    long n = fault ? pr_user_str_f(buf, cap, (void *)ptr)
                   : bpf_probe_read_user_str(buf, cap, (void *)ptr);
    if (n < 0) {
        buf[0] = 0;
        return n;
    }
    if (n > 0)
        *len = n;
    if (n == cap) {
        char next = 0;
        if (fault)
            pr_user_bytes_f(&next, 1, (void *)(ptr + cap - 1));
        else
            bpf_probe_read_user(&next, 1, (void *)(ptr + cap - 1));
        if (next)
            return PR_STR_TRUNCATED;
    }
    return PR_STR_OK;
}
#endif

#ifdef PR_USE_READ_KSTR
/* The same for kernel memory (tracepoint strings). `more`: whether bytes may follow the
   buffer's worth (a __data_loc string) or not (a char[N] field read whole). */
static __always_inline __s64 pr_read_kstr(char *buf, __u32 cap, __u64 ptr, int more,
                                          __u32 *len)
{
    *len = 1;
    long n = bpf_probe_read_kernel_str(buf, cap, (void *)ptr);
    if (n < 0) {
        buf[0] = 0;
        return n;
    }
    if (n > 0)
        *len = n;
    if (more && n == cap) {
        char next = 0;
        bpf_probe_read_kernel(&next, 1, (void *)(ptr + cap - 1));
        if (next)
            return PR_STR_TRUNCATED;
    }
    return PR_STR_OK;
}
#endif

#ifdef PR_USE_READ_LSTR
/* Read exactly min(len, cap) bytes (a pointer + length string, not NUL-terminated)
   into buf[cap + 1] and terminate it. `fault` as for pr_read_str. */
static __always_inline __s64 pr_read_lstr(char *buf, __u32 cap, __u64 ptr, __s64 len,
                                          int fault, __u32 *taken)
{
    *taken = 1;
    if (!ptr) {
        buf[0] = 0;
        return PR_STR_NULL;
    }
    __s64 status = PR_STR_OK;
    if (len < 0)
        len = 0;
    if (len > cap) {
        len = cap;
        status = PR_STR_TRUNCATED;
    }
    __u32 n = len & 0xffff;
    if (n > cap)
        n = cap;
    long err = 0;
    if (n)
        err = fault ? pr_user_bytes_f(buf, n, (void *)ptr)
                    : bpf_probe_read_user(buf, n, (void *)ptr);
    if (err < 0) {
        buf[0] = 0;
        return err;
    }
    buf[n & 0xffff] = 0;
    *taken = n + 1;
    return status;
}
#endif
