/* planrunner plan: usdt-print -- generated, do not edit */
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
    __s64 f0;
    __u64 f1;
    __s64 f2;
    __u64 f3;
};
_Static_assert(sizeof(struct pr_rec_0) == 72, "record layout (render/layout.py)");

/* probe widths */
struct pr_args_widths {
    __u64 pr_unused;
    __s64 v1;
    __u64 v4;
    __s64 v7;
    __u64 v8;
};

/* pr_id: bpf_get_current_pid_tgid(), read once by the thunk */
static __always_inline int pr_body_widths(struct pr_args_widths *a, __u64 pr_id)
{
    __u32 pr_pid = pr_id >> 32;
    __u32 pr_tid = (__u32)pr_id;
    __u64 pr_ts = bpf_ktime_get_ns();
    do {
        do {
            struct pr_rec_0 *ev = pr_events.ringbuf_reserve(sizeof(struct pr_rec_0));
            if (!ev) { pr_lost_record(); break; }
            pr_fill_hdr(&ev->h, 0, pr_id, pr_ts);
            ev->f0 = (__s64)(((__s8)(a->v1)));
            ev->f1 = (__u64)(((__u16)(a->v4)));
            ev->f2 = (__s64)(((__s64)(a->v7)));
            ev->f3 = (__u64)(((__u64)(a->v8)));
            pr_events.ringbuf_submit(ev, pr_wakeup_flags(sizeof(struct pr_rec_0)));
        } while (0);
    } while (0);
    return 0;
}

int pr_widths_s0(struct pt_regs *ctx)
{
    __u64 pr_id = bpf_get_current_pid_tgid();
#if !defined(PR_DISPATCHED)
    if (pr_skip(PR_CFG_SCOPE_UPROBE, pr_id))
        return 0;
#endif
    if (pr_ring_full(72))
        return 0;  /* counted lost before reading anything for it */
    struct pr_args_widths pr_a = {};
    pr_a.v1 = (__s64)(__s8)ctx->di;
    pr_a.v4 = (__u64)(__u16)ctx->cx;
    {
        __s64 _pr_v = 0;
        bpf_probe_read_user(&_pr_v, sizeof(_pr_v), (void *)((__u64)ctx->sp + 8ULL));
        pr_a.v7 = (__s64)_pr_v;
    }
    {
        __u64 _pr_v = 0;
        bpf_probe_read_user(&_pr_v, sizeof(_pr_v), (void *)((__u64)ctx->sp + 16ULL));
        pr_a.v8 = (__u64)_pr_v;
    }
    return pr_body_widths(&pr_a, pr_id);
}

/* Every uprobe site's thunk, by its slot (the runtime fills it): one uprobe_multi link
   per binary runs pr_uprobe_dispatch at all its sites, each with its slot as the
   attach cookie. A sleepable thunk is never here: a sleepable program cannot use a prog
   array, so it keeps a link of its own. With PR_DISPATCHED (the loader attaches
   uprobes so) the scope check is made here, for every thunk this calls. */
BPF_PROG_ARRAY(pr_uprobe_sites, 1);

int pr_uprobe_dispatch(struct pt_regs *ctx)
{
    if (pr_skip(PR_CFG_SCOPE_UPROBE, bpf_get_current_pid_tgid()))
        return 0;
    pr_uprobe_sites.call(ctx, (__u32)bpf_get_attach_cookie(ctx));
    return 0;  /* an empty slot: a site attached on its own, never through here */
}
