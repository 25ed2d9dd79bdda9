/* planrunner plan: uretprobe-string -- generated, do not edit */
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


#define PR_RINGBUF_PAGES 1024
BPF_RINGBUF_OUTPUT(pr_events, PR_RINGBUF_PAGES);

/* the same pages as the map above (PAGE_SIZE is what bcc's macro counts in) */
#define PR_RINGBUF_BYTES (PR_RINGBUF_PAGES * PAGE_SIZE)
#define PR_WAKEUP_SHARE 16

/* templates/record_helpers.h: included verbatim */

struct pr_rec_0 {
    struct pr_hdr h;
    __u64 f2;
    __u64 f0_ptr;
    __s64 f0_st;
    char f0[41];
    char f0_pad[7];
    __u64 f1_ptr;
    __s64 f1_st;
    char f1[16];
};
_Static_assert(sizeof(struct pr_rec_0) == 144, "record layout (render/layout.py)");

/* probe ret */
struct pr_args_ret {
    __u64 pr_unused;
    __u64 v0;
};
struct pr_scratch_ret {
    char s0[41];
    __s64 st0;
    __u32 n0;
};
#ifdef PR_SLEEPABLE
/* sleepable: another task may run this probe on this CPU while it waits for a page,
   so its scratch is the task's own, not the CPU's (task storage) */
PR_TASK_STORAGE(pr_scratch_ret, struct pr_scratch_ret);
#else
BPF_PERCPU_ARRAY(pr_scratch_ret, struct pr_scratch_ret, 1);
#endif

/* pr_id: bpf_get_current_pid_tgid(), read once by the thunk */
static __always_inline int pr_body_ret(struct pr_args_ret *a, __u64 pr_id)
{
    __u32 pr_pid = pr_id >> 32;
    __u32 pr_tid = (__u32)pr_id;
    __u32 pr_cpu = bpf_get_smp_processor_id();
    __u64 pr_ts = bpf_ktime_get_ns();
    char pr_comm[16] __attribute__((aligned(8)));
    pr_current_comm(pr_comm);
#ifdef PR_SLEEPABLE
    struct pr_scratch_ret *sc = pr_scratch_ret.task_storage_get(
        bpf_get_current_task_btf(), 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
#else
    __u32 pr_zero = 0;
    struct pr_scratch_ret *sc = pr_scratch_ret.lookup(&pr_zero);
#endif
    if (!sc)
        return 0;
    do {
        sc->st0 = pr_read_str(sc->s0, 41, a->v0, PR_FAULT, &sc->n0);
        do {
            struct pr_rec_0 *ev = pr_events.ringbuf_reserve(sizeof(struct pr_rec_0));
            if (!ev) { pr_lost_record(); break; }
            pr_fill_hdr(&ev->h, 0, pr_id, pr_ts);
            ev->f0_ptr = a->v0;
            ev->f0_st = sc->st0;
            bpf_probe_read_kernel_str(ev->f0, 41, (sc->s0));
            ev->f1_ptr = 0;
            ev->f1_st = PR_STR_OK;
            bpf_probe_read_kernel_str(ev->f1, 16, (pr_comm));
            ev->f2 = (__u64)(((__u32)(pr_cpu)));
            pr_events.ringbuf_submit(ev, pr_wakeup_flags(sizeof(struct pr_rec_0)));
        } while (0);
    } while (0);
    return 0;
}

int pr_ret_s0(struct pt_regs *ctx)
{
    __u64 pr_id = bpf_get_current_pid_tgid();
#if !defined(PR_DISPATCHED) || defined(PR_SLEEPABLE)
    if (pr_skip(PR_CFG_SCOPE_UPROBE, pr_id))
        return 0;
#endif
    if (pr_ring_full(144))
        return 0;  /* counted lost before reading anything for it */
    struct pr_args_ret pr_a = {};
    pr_a.v0 = (__u64)ctx->ax;
    return pr_body_ret(&pr_a, pr_id);
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
