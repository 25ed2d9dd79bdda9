/* planrunner plan: usdt-strings -- generated, do not edit */
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
/* render/contracts.py: generated */

/* templates/runtime_helpers.h: included verbatim */


#define PR_RINGBUF_PAGES 512
BPF_RINGBUF_OUTPUT(pr_events, PR_RINGBUF_PAGES);

/* the same pages as the map above (PAGE_SIZE is what bcc's macro counts in) */
#define PR_RINGBUF_BYTES (PR_RINGBUF_PAGES * PAGE_SIZE)
#define PR_WAKEUP_SHARE 16

/* templates/record_helpers.h: included verbatim */

struct pr_rec_0 {
    struct pr_hdr h;
    __u64 f0_ptr;
    __s64 f0_st;
    char f0[33];
    char f0_pad[7];
};
_Static_assert(sizeof(struct pr_rec_0) == 96, "record layout (render/layout.py)");

struct pr_rec_1 {
    struct pr_hdr h;
    __s64 f0;
    __s64 f1;
};
_Static_assert(sizeof(struct pr_rec_1) == 56, "record layout (render/layout.py)");

/* probe s */
struct pr_args_s {
    __u64 pr_unused;
    __u64 v1;
};
struct pr_scratch_s {
    char s1[33];
    __s64 st1;
    __u32 n1;
};
#ifdef PR_SLEEPABLE
/* sleepable: another task may run this probe on this CPU while it waits for a page,
   so its scratch is the task's own, not the CPU's (task storage) */
PR_TASK_STORAGE(pr_scratch_s, struct pr_scratch_s);
#else
BPF_PERCPU_ARRAY(pr_scratch_s, struct pr_scratch_s, 1);
#endif

/* pr_id: bpf_get_current_pid_tgid(), read once by the thunk */
static __always_inline int pr_body_s(struct pr_args_s *a, __u64 pr_id)
{
    __u32 pr_pid = pr_id >> 32;
    __u32 pr_tid = (__u32)pr_id;
    __u64 pr_ts = bpf_ktime_get_ns();
    /* scratch: looked up only where a string is too long for the smallest record */
    do {
        do {
            __u32 pr_size_0 = 72;
            __u32 pr_len_0;
            struct pr_rec_0 *ev = pr_events.ringbuf_reserve(72);
            if (!ev) { pr_lost_record(); break; }
            __s64 pr_st_0 = pr_read_str(ev->f0, 16, a->v1, PR_FAULT, &pr_len_0);
            if (pr_st_0 == PR_STR_TRUNCATED) {
                pr_events.ringbuf_discard(ev, BPF_RB_NO_WAKEUP);
                #ifdef PR_SLEEPABLE
                struct pr_scratch_s *sc = pr_scratch_s.task_storage_get(
                    bpf_get_current_task_btf(), 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
                #else
                __u32 pr_zero = 0;
                struct pr_scratch_s *sc = pr_scratch_s.lookup(&pr_zero);
                #endif
                if (!sc) break;
                pr_st_0 = pr_read_str(sc->s1, 33, a->v1, PR_FAULT, &pr_len_0);
                if (pr_len_0 <= 16) {
                    pr_size_0 = 72;
                    ev = pr_events.ringbuf_reserve(72);
                    if (ev)
                        bpf_probe_read_kernel_str(ev->f0, 16, sc->s1);
                } else {
                    pr_size_0 = sizeof(struct pr_rec_0);
                    ev = pr_events.ringbuf_reserve(sizeof(struct pr_rec_0));
                    if (ev)
                        bpf_probe_read_kernel_str(ev->f0, 33, sc->s1);
                }
                if (!ev) { pr_lost_record(); break; }
            }
            pr_fill_hdr(&ev->h, 0, pr_id, pr_ts);
            ev->f0_ptr = a->v1;
            ev->f0_st = pr_st_0;
            pr_events.ringbuf_submit(ev, pr_wakeup_flags(pr_size_0));
        } while (0);
    } while (0);
    return 0;
}

int pr_s_s0(struct pt_regs *ctx)
{
    __u64 pr_id = bpf_get_current_pid_tgid();
#if !defined(PR_DISPATCHED) || defined(PR_SLEEPABLE)
    if (pr_skip(PR_CFG_SCOPE_UPROBE, pr_id))
        return 0;
#endif
    if (pr_ring_full(72))
        return 0;  /* counted lost before reading anything for it */
    struct pr_args_s pr_a = {};
    pr_a.v1 = (__u64)ctx->ax;
    return pr_body_s(&pr_a, pr_id);
}

/* probe multi */
struct pr_args_multi {
    __u64 pr_unused;
    __s64 v1;
    __s64 v2;
};

/* pr_id: bpf_get_current_pid_tgid(), read once by the thunk */
static __always_inline int pr_body_multi(struct pr_args_multi *a, __u64 pr_id)
{
    __u32 pr_pid = pr_id >> 32;
    __u32 pr_tid = (__u32)pr_id;
    __u64 pr_ts = bpf_ktime_get_ns();
    do {
        do {
            struct pr_rec_1 *ev = pr_events.ringbuf_reserve(sizeof(struct pr_rec_1));
            if (!ev) { pr_lost_record(); break; }
            pr_fill_hdr(&ev->h, 1, pr_id, pr_ts);
            ev->f0 = (__s64)(((__s32)(a->v1)));
            ev->f1 = (__s64)(((__s32)(a->v2)));
            pr_events.ringbuf_submit(ev, pr_wakeup_flags(sizeof(struct pr_rec_1)));
        } while (0);
    } while (0);
    return 0;
}

int pr_multi_s0(struct pt_regs *ctx)
{
    __u64 pr_id = bpf_get_current_pid_tgid();
#if !defined(PR_DISPATCHED)
    if (pr_skip(PR_CFG_SCOPE_UPROBE, pr_id))
        return 0;
#endif
    if (pr_ring_full(56))
        return 0;  /* counted lost before reading anything for it */
    struct pr_args_multi pr_a = {};
    pr_a.v1 = 1LL;
    pr_a.v2 = 10LL;
    return pr_body_multi(&pr_a, pr_id);
}

int pr_multi_s1(struct pt_regs *ctx)
{
    __u64 pr_id = bpf_get_current_pid_tgid();
#if !defined(PR_DISPATCHED)
    if (pr_skip(PR_CFG_SCOPE_UPROBE, pr_id))
        return 0;
#endif
    if (pr_ring_full(56))
        return 0;  /* counted lost before reading anything for it */
    struct pr_args_multi pr_a = {};
    pr_a.v1 = 2LL;
    pr_a.v2 = 20LL;
    return pr_body_multi(&pr_a, pr_id);
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
