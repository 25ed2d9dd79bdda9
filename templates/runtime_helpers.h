/* Helpers every plan program uses (included verbatim by program.bpf.c.j2).
   The string readers are compiled only when the program defines their PR_USE_ macro
   (render/program.py does, for what its statements call): clang pays for unused ones.
   Coupled with render/layout.py: STR_NULL/STR_OK/STR_TRUNCATED status values. */
#define PR_STR_NULL 0
#define PR_STR_OK 1
#define PR_STR_TRUNCATED 2

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
#else
#define pr_user_str_f bpf_probe_read_user_str
#define pr_user_bytes_f bpf_probe_read_user
#endif

/* Filled by the runtime after loading: [PR_CFG_PID] the --pid filter for tracepoints
   (uprobes are filtered by the kernel at attach), [PR_CFG_SELF] planrunner's own process,
   whose events are dropped: tracing the Python that runs planrunner would otherwise feed
   on itself; [PR_CFG_NR_CPUS] the possible CPUs, which scale the ring buffer's wakeup
   watermark (record_helpers.h). */
#define PR_CFG_PID 0
#define PR_CFG_SELF 1
#define PR_CFG_NR_CPUS 2
BPF_ARRAY(pr_config, __u32, 3);

static __always_inline int pr_skip(int check_pid)
{
    __u32 tgid = bpf_get_current_pid_tgid() >> 32;
    __u32 key = PR_CFG_SELF;
    __u32 *self = pr_config.lookup(&key);
    if (self && *self == tgid)
        return 1;
    if (check_pid) {
        key = PR_CFG_PID;
        __u32 *want = pr_config.lookup(&key);
        if (want && *want && *want != tgid)
            return 1;
    }
    return 0;
}

#ifdef PR_USE_READ_STR
/* Read a NUL-terminated user string into buf[cap] (content <= cap-1 bytes).
   Returns a status: PR_STR_NULL for a NULL pointer, -errno when unreadable (the
   consumer retries from user space), PR_STR_TRUNCATED when more bytes followed.
   `fault`: PR_FAULT in a probe that may be loaded sleepable, else PR_NOFAULT. */
static __always_inline __s64 pr_read_str(char *buf, __u32 cap, __u64 ptr, int fault)
{
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
static __always_inline __s64 pr_read_kstr(char *buf, __u32 cap, __u64 ptr, int more)
{
    long n = bpf_probe_read_kernel_str(buf, cap, (void *)ptr);
    if (n < 0) {
        buf[0] = 0;
        return n;
    }
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
                                          int fault)
{
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
    return status;
}
#endif
