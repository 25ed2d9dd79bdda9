/* planrunner plan: agg-avg -- generated, do not edit */
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


#define PR_RINGBUF_PAGES 256
BPF_RINGBUF_OUTPUT(pr_events, PR_RINGBUF_PAGES);

/* the same pages as the map above (PAGE_SIZE is what bcc's macro counts in) */
#define PR_RINGBUF_BYTES (PR_RINGBUF_PAGES * PAGE_SIZE)
#define PR_WAKEUP_SHARE 16

/* templates/record_helpers.h: included verbatim */

struct pr_agg_0_key {
    char k0[16];
    __u64 k1;
} __attribute__((aligned(8)));

struct pr_agg_0_val {
    __u64 n;
    __s64 sum;
};

BPF_PERCPU_HASH(pr_agg_0, struct pr_agg_0_key, struct pr_agg_0_val, 10240);

BPF_PERCPU_ARRAY(pr_agg_0_lost, __u64, 1);  /* updates refused: map full */

/* probe value */
struct pr_args_value {
    __u64 pr_unused;
    __s64 v1;
};
struct pr_scratch_value {
    struct pr_agg_0_key agg0_key;
};
BPF_PERCPU_ARRAY(pr_scratch_value, struct pr_scratch_value, 1);

/* pr_id: bpf_get_current_pid_tgid(), read once by the thunk */
static __always_inline int pr_body_value(struct pr_args_value *a, __u64 pr_id)
{
    __u32 pr_pid = pr_id >> 32;
    __u32 pr_tid = (__u32)pr_id;
    char pr_comm[16] __attribute__((aligned(8)));
    pr_current_comm(pr_comm);
    __u32 pr_zero = 0;
    struct pr_scratch_value *sc = pr_scratch_value.lookup(&pr_zero);
    if (!sc)
        return 0;
    do {
        do {
            /* output 0: avg */
            struct pr_agg_0_key *pr_k = &sc->agg0_key;
            __builtin_memset(pr_k, 0, 24);
            bpf_probe_read_kernel_str(pr_k->k0, 16, (pr_comm));
            pr_k->k1 = (__u64)(((__u32)(pr_tid)));
            __s64 pr_x = (__s64)(((__s64)(a->v1)));
            struct pr_agg_0_val pr_init = {};
            struct pr_agg_0_val *pr_v = pr_agg_0.lookup_or_try_init(pr_k, &pr_init);
            if (!pr_v) {
                pr_count(PR_LOST_MAPFULL);
                __u32 pr_lk = 0;
                __u64 *pr_lost = pr_agg_0_lost.lookup(&pr_lk);
                if (pr_lost)
                    *pr_lost += 1;
                break;
            }
            pr_v->n += 1;
            pr_v->sum += pr_x;
        } while (0);
    } while (0);
    return 0;
}

int pr_value_s0(struct pt_regs *ctx)
{
    __u64 pr_id = bpf_get_current_pid_tgid();
#if !defined(PR_DISPATCHED)
    if (pr_skip(PR_CFG_SCOPE_UPROBE, pr_id))
        return 0;
#endif
    struct pr_args_value pr_a = {};
    pr_a.v1 = (__s64)ctx->di;
    return pr_body_value(&pr_a, pr_id);
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
