/* planrunner plan: agg-mixed -- generated, do not edit */
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

struct pr_rec_0 {
    struct pr_hdr h;
    __s64 f0;
};
_Static_assert(sizeof(struct pr_rec_0) == 48, "record layout (render/layout.py)");

struct pr_agg_1_key {
    char k0[16];
} __attribute__((aligned(8)));

BPF_PERCPU_HASH(pr_agg_1, struct pr_agg_1_key, __u64, 10240);

BPF_PERCPU_ARRAY(pr_agg_1_lost, __u64, 1);  /* updates refused: map full */

struct pr_agg_2_key {
    __u64 slot;
} __attribute__((aligned(8)));

struct pr_agg_2_val {
    __u64 n;
    __u64 sum;
};

BPF_PERCPU_HASH(pr_agg_2, struct pr_agg_2_key, struct pr_agg_2_val, 10240);

BPF_PERCPU_ARRAY(pr_agg_2_lost, __u64, 1);  /* updates refused: map full */

/* probe tick */
struct pr_args_tick {
    __u64 pr_unused;
    __s64 v1;
};
struct pr_scratch_tick {
    struct pr_agg_1_key agg1_key;
};
BPF_PERCPU_ARRAY(pr_scratch_tick, struct pr_scratch_tick, 1);

/* pr_id: bpf_get_current_pid_tgid(), read once by the thunk */
static __always_inline int pr_body_tick(struct pr_args_tick *a, __u64 pr_id)
{
    __u32 pr_pid = pr_id >> 32;
    __u32 pr_tid = (__u32)pr_id;
    __u64 pr_ts = bpf_ktime_get_ns();
    char pr_comm[16] __attribute__((aligned(8)));
    pr_current_comm(pr_comm);
    __u32 pr_zero = 0;
    struct pr_scratch_tick *sc = pr_scratch_tick.lookup(&pr_zero);
    if (!sc)
        return 0;
    do {
        do {
            if (!((((__s64)((__s32)(a->v1))) == 2LL))) break;
            struct pr_rec_0 *ev = pr_events.ringbuf_reserve(sizeof(struct pr_rec_0));
            if (!ev) { pr_lost_record(); break; }
            pr_fill_hdr(&ev->h, 0, pr_id, pr_ts);
            ev->f0 = (__s64)(((__s32)(a->v1)));
            pr_events.ringbuf_submit(ev, pr_wakeup_flags(sizeof(struct pr_rec_0)));
        } while (0);
        do {
            /* output 1: count */
            struct pr_agg_1_key *pr_k = &sc->agg1_key;
            __builtin_memset(pr_k, 0, 16);
            bpf_probe_read_kernel_str(pr_k->k0, 16, (pr_comm));
            __u64 pr_init = 0;
            __u64 *pr_v = pr_agg_1.lookup_or_try_init(pr_k, &pr_init);
            if (!pr_v) {
                pr_count(PR_LOST_MAPFULL);
                __u32 pr_lk = 0;
                __u64 *pr_lost = pr_agg_1_lost.lookup(&pr_lk);
                if (pr_lost)
                    *pr_lost += 1;
                break;
            }
            *pr_v += 1;
        } while (0);
        do {
            /* output 2: hist */
            struct pr_agg_2_key pr_kv = {};
            struct pr_agg_2_key *pr_k = &pr_kv;
            __u64 pr_x = (__u64)(((__u64)(pr_ts)));
            __u64 pr_t = pr_x;
            __u64 pr_slot = 0;
            if (pr_t) {
                pr_slot = 1;
                if (pr_t >> 32) { pr_t >>= 32; pr_slot += 32; }
                if (pr_t >> 16) { pr_t >>= 16; pr_slot += 16; }
                if (pr_t >> 8) { pr_t >>= 8; pr_slot += 8; }
                if (pr_t >> 4) { pr_t >>= 4; pr_slot += 4; }
                if (pr_t >> 2) { pr_t >>= 2; pr_slot += 2; }
                if (pr_t >> 1) pr_slot += 1;
            }
            pr_k->slot = pr_slot;
            struct pr_agg_2_val pr_init = {};
            struct pr_agg_2_val *pr_v = pr_agg_2.lookup_or_try_init(pr_k, &pr_init);
            if (!pr_v) {
                pr_count(PR_LOST_MAPFULL);
                __u32 pr_lk = 0;
                __u64 *pr_lost = pr_agg_2_lost.lookup(&pr_lk);
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

int pr_tick_s0(struct pt_regs *ctx)
{
    __u64 pr_id = bpf_get_current_pid_tgid();
#if !defined(PR_DISPATCHED)
    if (pr_skip(PR_CFG_SCOPE_UPROBE, pr_id))
        return 0;
#endif
    struct pr_args_tick pr_a = {};
    pr_a.v1 = (__s64)(__s32)ctx->di;
    return pr_body_tick(&pr_a, pr_id);
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
