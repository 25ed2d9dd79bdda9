/* planrunner plan: injection -- generated, do not edit */
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

/* templates/expr_helpers.h: included verbatim */

#define PR_RINGBUF_PAGES 1024
BPF_RINGBUF_OUTPUT(pr_events, PR_RINGBUF_PAGES);

/* the same pages as the map above (PAGE_SIZE is what bcc's macro counts in) */
#define PR_RINGBUF_BYTES (PR_RINGBUF_PAGES * PAGE_SIZE)
#define PR_WAKEUP_SHARE 16

/* templates/record_helpers.h: included verbatim */

struct pr_rec_0 {
    struct pr_hdr h;
    __u64 f0_ptr;
    __s64 f0_st;
    char f0[129];
    char f0_pad[7];
};
_Static_assert(sizeof(struct pr_rec_0) == 192, "record layout (render/layout.py)");

/* probe start */
struct pr_args_start {
    __u64 pr_unused;
    __u64 v2;
};
struct pr_scratch_start {
    char s2[129];
    __s64 st2;
    __u32 n2;
    char t0[20];
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
        /* "* / #include <x>?-?-?/" */
        sc->t0[0] = 42; sc->t0[1] = 47; sc->t0[2] = 32; sc->t0[3] = 35; sc->t0[4] = 105; sc->t0[5] = 110; sc->t0[6] = 99; sc->t0[7] = 108;
        sc->t0[8] = 117; sc->t0[9] = 100; sc->t0[10] = 101; sc->t0[11] = 32; sc->t0[12] = 60; sc->t0[13] = 120; sc->t0[14] = 62; sc->t0[15] = 10;
        sc->t0[16] = 63; sc->t0[17] = 63; sc->t0[18] = 47; sc->t0[19] = 0;
        if (!(((/* ""; system("rm -rf /"); / *" */ ((const __u8 *)((sc->s2)))[0] == 34 && ((const __u8 *)((sc->s2)))[1] == 59 && ((const __u8 *)((sc->s2)))[2] == 32 && ((const __u8 *)((sc->s2)))[3] == 115 && ((const __u8 *)((sc->s2)))[4] == 121 && ((const __u8 *)((sc->s2)))[5] == 115 && ((const __u8 *)((sc->s2)))[6] == 116 && ((const __u8 *)((sc->s2)))[7] == 101 && ((const __u8 *)((sc->s2)))[8] == 109 && ((const __u8 *)((sc->s2)))[9] == 40 && ((const __u8 *)((sc->s2)))[10] == 34 && ((const __u8 *)((sc->s2)))[11] == 114 && ((const __u8 *)((sc->s2)))[12] == 109 && ((const __u8 *)((sc->s2)))[13] == 32 && ((const __u8 *)((sc->s2)))[14] == 45 && ((const __u8 *)((sc->s2)))[15] == 114 && ((const __u8 *)((sc->s2)))[16] == 102 && ((const __u8 *)((sc->s2)))[17] == 32 && ((const __u8 *)((sc->s2)))[18] == 47 && ((const __u8 *)((sc->s2)))[19] == 34 && ((const __u8 *)((sc->s2)))[20] == 41 && ((const __u8 *)((sc->s2)))[21] == 59 && ((const __u8 *)((sc->s2)))[22] == 32 && ((const __u8 *)((sc->s2)))[23] == 47 && ((const __u8 *)((sc->s2)))[24] == 42 && ((const __u8 *)((sc->s2)))[25] == 0) || pr_str_contains((sc->s2), 129, sc->t0, 19)))) break;
        do {
            __u32 pr_len_0 = sc->n2;
            __u32 pr_size_0;
            struct pr_rec_0 *ev;
            if (pr_len_0 <= 16) {
                pr_size_0 = 72;
                ev = pr_events.ringbuf_reserve(72);
                if (ev)
                    bpf_probe_read_kernel_str(ev->f0, 16, (sc->s2));
            } else if (pr_len_0 <= 64) {
                pr_size_0 = 120;
                ev = pr_events.ringbuf_reserve(120);
                if (ev)
                    bpf_probe_read_kernel_str(ev->f0, 64, (sc->s2));
            } else {
                pr_size_0 = sizeof(struct pr_rec_0);
                ev = pr_events.ringbuf_reserve(sizeof(struct pr_rec_0));
                if (ev)
                    bpf_probe_read_kernel_str(ev->f0, 129, (sc->s2));
            }
            if (!ev) { pr_lost_record(); break; }
            pr_fill_hdr(&ev->h, 0, pr_id, pr_ts);
            ev->f0_ptr = a->v2;
            ev->f0_st = sc->st2;
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
    {
        __u64 _pr_v = 0;
        bpf_probe_read_user(&_pr_v, sizeof(_pr_v), (void *)((__u64)ctx->ax + (__u64)ctx->r12 * 8));
        pr_a.v2 = (__u64)_pr_v;
    }
    return pr_body_start(&pr_a, pr_id);
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
