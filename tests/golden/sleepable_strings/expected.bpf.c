/* planrunner plan: sleepable-strings -- generated, do not edit */
/* EFAULT (a stack the kernel could not walk), which <asm/ptrace.h> brought along */
#include <uapi/asm-generic/errno-base.h>
#if defined(__x86_64__) && !defined(_ASM_X86_PTRACE_H)
/* struct pt_regs as arch/x86/include/asm/ptrace.h lays it out: the frame the kernel's
   entry code saves, an ABI (ptrace's user_regs_struct; cs and ss are 8-byte unions
   since FRED). That header costs ~30 ms of every compile (tests/e2e/test_pt_regs.py
   checks these offsets against it). */
struct pt_regs {
    unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
    unsigned long ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
};
#else
#include <asm/ptrace.h>
#endif

#define PR_USE_READ_STR
#define PR_USE_READ_LSTR
/* render/contracts.py: generated */

/* templates/runtime_helpers.h: included verbatim */


#define PR_RINGBUF_PAGES 1024
BPF_RINGBUF_OUTPUT(pr_events, PR_RINGBUF_PAGES);

/* the same pages as the map above (PAGE_SIZE is what bcc's macro counts in) */
#define PR_RINGBUF_BYTES (PR_RINGBUF_PAGES * PAGE_SIZE)
#define PR_WAKEUP_SHARE 16

/* templates/record_helpers.h: included verbatim */

struct pr_rec_0 {
    struct pr_hdr h;
    __u64 f0;
    __u64 f1_ptr;
    __s64 f1_st;
    char f1[129];
    char f1_pad[7];
};
_Static_assert(sizeof(struct pr_rec_0) == 200, "record layout (render/layout.py)");

struct pr_rec_1 {
    struct pr_hdr h;
    __u64 f0_ptr;
    __s64 f0_st;
    char f0[5];
    char f0_pad[3];
    __u64 f1_ptr;
    __s64 f1_st;
    char f1[129];
    char f1_pad[7];
};
_Static_assert(sizeof(struct pr_rec_1) == 216, "record layout (render/layout.py)");

struct pr_rec_2 {
    struct pr_hdr h;
    __u64 f0;
};
_Static_assert(sizeof(struct pr_rec_2) == 48, "record layout (render/layout.py)");

/* probe start */
struct pr_args_start {
    __u64 pr_unused;
    __u64 v1;
    __u64 v2;
};
struct pr_scratch_start {
    char s2[129];
    __s64 st2;
    __u32 n2;
};
#ifdef PR_SLEEPABLE
/* sleepable: another task may run this probe on this CPU while it waits for a page,
   so its scratch is the task's own, not the CPU's (task storage) */
PR_TASK_STORAGE(pr_scratch_start, struct pr_scratch_start);
#else
BPF_PERCPU_ARRAY(pr_scratch_start, struct pr_scratch_start, 1);
#endif

/* pr_id: bpf_get_current_pid_tgid(), read once by the thunk */
static __always_inline int pr_body_start(struct pr_args_start *a, __u64 pr_id)
{
    __u32 pr_pid = pr_id >> 32;
    __u32 pr_tid = (__u32)pr_id;
    __u64 pr_ts = bpf_ktime_get_ns();
#ifdef PR_SLEEPABLE
    struct pr_scratch_start *sc = pr_scratch_start.task_storage_get(
        bpf_get_current_task_btf(), 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
#else
    __u32 pr_zero = 0;
    struct pr_scratch_start *sc = pr_scratch_start.lookup(&pr_zero);
#endif
    if (!sc)
        return 0;
    do {
        sc->st2 = pr_read_str(sc->s2, 129, a->v2, PR_FAULT, &sc->n2);
        if (!((/* "/api" */ ((const __u8 *)((sc->s2)))[0] == 47 && ((const __u8 *)((sc->s2)))[1] == 97 && ((const __u8 *)((sc->s2)))[2] == 112 && ((const __u8 *)((sc->s2)))[3] == 105))) break;
        do {
            __u32 pr_len_0 = sc->n2;
            __u32 pr_size_0;
            struct pr_rec_0 *ev;
            if (pr_len_0 <= 16) {
                pr_size_0 = 80;
                ev = pr_events.ringbuf_reserve(80);
                if (ev)
                    bpf_probe_read_kernel_str(ev->f1, 16, (sc->s2));
            } else if (pr_len_0 <= 64) {
                pr_size_0 = 128;
                ev = pr_events.ringbuf_reserve(128);
                if (ev)
                    bpf_probe_read_kernel_str(ev->f1, 64, (sc->s2));
            } else {
                pr_size_0 = sizeof(struct pr_rec_0);
                ev = pr_events.ringbuf_reserve(sizeof(struct pr_rec_0));
                if (ev)
                    bpf_probe_read_kernel_str(ev->f1, 129, (sc->s2));
            }
            if (!ev) { pr_lost_record(); break; }
            pr_fill_hdr(&ev->h, 0, pr_id, pr_ts);
            ev->f0 = (__u64)(((__u64)(a->v1)));
            ev->f1_ptr = a->v2;
            ev->f1_st = sc->st2;
            pr_events.ringbuf_submit(ev, pr_wakeup_flags(pr_size_0));
        } while (0);
    } while (0);
    return 0;
}

int pr_start_s0(struct pt_regs *ctx)
{
    __u64 pr_id = bpf_get_current_pid_tgid();
#if !defined(PR_DISPATCHED) || defined(PR_SLEEPABLE)
    if (pr_skip(PR_CFG_SCOPE_UPROBE, pr_id))
        return 0;
#endif
    struct pr_args_start pr_a = {};
    pr_a.v1 = (__u64)ctx->di;
    {
        __u64 _pr_v = 0;
        bpf_probe_read_user(&_pr_v, sizeof(_pr_v), (void *)((__u64)ctx->ax + (__u64)ctx->r12 * 8));
        pr_a.v2 = (__u64)_pr_v;
    }
    return pr_body_start(&pr_a, pr_id);
}

/* probe raw */
struct pr_args_raw {
    __u64 pr_unused;
    __u64 v1;
    __u64 v2;
};
struct pr_scratch_raw {
    char t0[129];
    char t1[5];
    __s64 t1_st;
    __u32 t1_n;
    char t2[129];
    __s64 t2_st;
    __u32 t2_n;
};
#ifdef PR_SLEEPABLE
/* sleepable: another task may run this probe on this CPU while it waits for a page,
   so its scratch is the task's own, not the CPU's (task storage) */
PR_TASK_STORAGE(pr_scratch_raw, struct pr_scratch_raw);
#else
BPF_PERCPU_ARRAY(pr_scratch_raw, struct pr_scratch_raw, 1);
#endif

/* pr_id: bpf_get_current_pid_tgid(), read once by the thunk */
static __always_inline int pr_body_raw(struct pr_args_raw *a, __u64 pr_id)
{
    __u32 pr_pid = pr_id >> 32;
    __u32 pr_tid = (__u32)pr_id;
    __u64 pr_ts = bpf_ktime_get_ns();
#ifdef PR_SLEEPABLE
    struct pr_scratch_raw *sc = pr_scratch_raw.task_storage_get(
        bpf_get_current_task_btf(), 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
#else
    __u32 pr_zero = 0;
    struct pr_scratch_raw *sc = pr_scratch_raw.lookup(&pr_zero);
#endif
    if (!sc)
        return 0;
    do {
        pr_user_str_f(sc->t0, 129, (const void *)(unsigned long)((__u64)(a->v2)));
        if (!((/* "/" */ ((const __u8 *)(sc->t0))[0] == 47))) break;
        do {
            __u64 pr_p_t1 = (__u64)(((__u64)(a->v2)));
            sc->t1_st = pr_read_str(sc->t1, 5, pr_p_t1, PR_FAULT, &sc->t1_n);
            __u64 pr_p_t2 = (__u64)(((__u64)(a->v2)));
            sc->t2_st = pr_read_lstr(sc->t2, 128, pr_p_t2, (__s64)(((__u64)(a->v1))), PR_FAULT, &sc->t2_n);
            __u32 pr_len_1 = sc->t2_n;
            __u32 pr_size_1;
            struct pr_rec_1 *ev;
            if (pr_len_1 <= 16) {
                pr_size_1 = 96;
                ev = pr_events.ringbuf_reserve(96);
                if (ev)
                    bpf_probe_read_kernel_str(ev->f1, 16, sc->t2);
            } else if (pr_len_1 <= 64) {
                pr_size_1 = 144;
                ev = pr_events.ringbuf_reserve(144);
                if (ev)
                    bpf_probe_read_kernel_str(ev->f1, 64, sc->t2);
            } else {
                pr_size_1 = sizeof(struct pr_rec_1);
                ev = pr_events.ringbuf_reserve(sizeof(struct pr_rec_1));
                if (ev)
                    bpf_probe_read_kernel_str(ev->f1, 129, sc->t2);
            }
            if (!ev) { pr_lost_record(); break; }
            pr_fill_hdr(&ev->h, 1, pr_id, pr_ts);
            ev->f0_ptr = pr_p_t1;
            ev->f0_st = sc->t1_st;
            bpf_probe_read_kernel_str(ev->f0, 5, sc->t1);
            ev->f1_ptr = pr_p_t2;
            ev->f1_st = sc->t2_st;
            pr_events.ringbuf_submit(ev, pr_wakeup_flags(pr_size_1));
        } while (0);
    } while (0);
    return 0;
}

int pr_raw_s0(struct pt_regs *ctx)
{
    __u64 pr_id = bpf_get_current_pid_tgid();
#if !defined(PR_DISPATCHED) || defined(PR_SLEEPABLE)
    if (pr_skip(PR_CFG_SCOPE_UPROBE, pr_id))
        return 0;
#endif
    struct pr_args_raw pr_a = {};
    pr_a.v1 = (__u64)ctx->di;
    {
        __u64 _pr_v = 0;
        bpf_probe_read_user(&_pr_v, sizeof(_pr_v), (void *)((__u64)ctx->ax + (__u64)ctx->r12 * 8));
        pr_a.v2 = (__u64)_pr_v;
    }
    return pr_body_raw(&pr_a, pr_id);
}

/* probe plain */
struct pr_args_plain {
    __u64 pr_unused;
    __u64 v1;
};

/* pr_id: bpf_get_current_pid_tgid(), read once by the thunk */
static __always_inline int pr_body_plain(struct pr_args_plain *a, __u64 pr_id)
{
    __u32 pr_pid = pr_id >> 32;
    __u32 pr_tid = (__u32)pr_id;
    __u64 pr_ts = bpf_ktime_get_ns();
    do {
        do {
            struct pr_rec_2 *ev = pr_events.ringbuf_reserve(sizeof(struct pr_rec_2));
            if (!ev) { pr_lost_record(); break; }
            pr_fill_hdr(&ev->h, 2, pr_id, pr_ts);
            ev->f0 = (__u64)(((__u64)(a->v1)));
            pr_events.ringbuf_submit(ev, pr_wakeup_flags(sizeof(struct pr_rec_2)));
        } while (0);
    } while (0);
    return 0;
}

int pr_plain_s0(struct pt_regs *ctx)
{
    __u64 pr_id = bpf_get_current_pid_tgid();
#if !defined(PR_DISPATCHED)
    if (pr_skip(PR_CFG_SCOPE_UPROBE, pr_id))
        return 0;
#endif
    if (pr_ring_full(48))
        return 0;  /* counted lost before reading anything for it */
    struct pr_args_plain pr_a = {};
    pr_a.v1 = (__u64)ctx->di;
    return pr_body_plain(&pr_a, pr_id);
}

/* Every uprobe site's thunk, by its slot (the runtime fills it): one uprobe_multi link
   per binary runs pr_uprobe_dispatch at all its sites, each with its slot as the
   attach cookie. A sleepable thunk is never here: a sleepable program cannot use a prog
   array, so it keeps a link of its own. With PR_DISPATCHED (the loader attaches
   uprobes so) the scope check is made here, for every thunk this calls. */
BPF_PROG_ARRAY(pr_uprobe_sites, 3);

int pr_uprobe_dispatch(struct pt_regs *ctx)
{
    if (pr_skip(PR_CFG_SCOPE_UPROBE, bpf_get_current_pid_tgid()))
        return 0;
    pr_uprobe_sites.call(ctx, (__u32)bpf_get_attach_cookie(ctx));
    return 0;  /* an empty slot: a site attached on its own, never through here */
}
