/* planrunner plan: span-match -- generated, do not edit */
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

/* templates/expr_helpers.h: included verbatim */

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
};
_Static_assert(sizeof(struct pr_rec_0) == 56, "record layout (render/layout.py)");

struct pr_rec_1 {
    struct pr_hdr h;
    __s64 f0;
    __u64 f1;
    __u64 f2;
};
_Static_assert(sizeof(struct pr_rec_1) == 64, "record layout (render/layout.py)");

/* an open begin of a nested span: its key, its process (0: any), its depth */
struct pr_span_lkey {
    __u64 k;
    __u64 tgid;
    __u64 level;
};

struct pr_span_call {
    __u64 ts;
    __s64 c0;
    __u64 m0;
    __u64 m1;
};
/* LRU: begins whose end never comes (a thread that died mid-span) are evicted by newer
   ones instead of filling the map. */
BPF_TABLE("lru_hash", struct pr_span_lkey, struct pr_span_call, pr_span_call, 10240);
/* open begins per key (level 0 of the key) */
BPF_TABLE("lru_hash", struct pr_span_lkey, __u64, pr_spandepth_call, 10240);

/* probe enter */
struct pr_args_enter {
    __u64 pr_unused;
    __s64 v2;
};
struct pr_scratch_enter {
    struct pr_span_call pr_span_call;
};
BPF_PERCPU_ARRAY(pr_scratch_enter, struct pr_scratch_enter, 1);

/* pr_id: bpf_get_current_pid_tgid(), read once by the thunk */
static __always_inline int pr_body_enter(struct pr_args_enter *a, __u64 pr_id)
{
    __u32 pr_pid = pr_id >> 32;
    __u32 pr_tid = (__u32)pr_id;
    __u64 pr_ts = bpf_ktime_get_ns();
    char pr_comm[16] __attribute__((aligned(8)));
    pr_current_comm(pr_comm);
    __u32 pr_zero = 0;
    struct pr_scratch_enter *sc = pr_scratch_enter.lookup(&pr_zero);
    if (!sc)
        return 0;
    do {
        struct pr_span_lkey pr_lkey_call_b = {};
        pr_lkey_call_b.k = pr_id;
        __u64 pr_open_call = 0;
        __u64 *pr_dp_call = pr_spandepth_call.lookup(&pr_lkey_call_b);
        if (pr_dp_call)
            pr_open_call = *pr_dp_call;
        __u32 pr_depth_call = pr_open_call;
        do {
            __u64 pr_nd = (__u64)pr_depth_call + 1;
            pr_spandepth_call.update(&pr_lkey_call_b, &pr_nd);
            if (pr_depth_call >= 16) { pr_count(PR_SPAN_OVERFLOW); break; }
            pr_lkey_call_b.level = pr_depth_call;
            struct pr_span_call *bv = &sc->pr_span_call;
            bv->ts = pr_ts;
            bv->c0 = (__s64)(((__s64)(a->v2)));
            __u64 pr_m0_call = (__u64)(((__s64)(a->v2)));
            bv->m0 = pr_m0_call;
            __u64 pr_m1_call = pr_str_hash((pr_comm), 16);
            bv->m1 = pr_m1_call;
            pr_span_call.update(&pr_lkey_call_b, bv);
        } while (0);
    } while (0);
    return 0;
}

int pr_enter_s0(struct pt_regs *ctx)
{
    __u64 pr_id = bpf_get_current_pid_tgid();
#if !defined(PR_DISPATCHED)
    if (pr_skip(PR_CFG_SCOPE_UPROBE, pr_id))
        return 0;
#endif
    struct pr_args_enter pr_a = {};
    pr_a.v2 = (__s64)ctx->bp;
    return pr_body_enter(&pr_a, pr_id);
}

/* probe exit */
struct pr_args_exit {
    __u64 pr_unused;
    __s64 v2;
};
struct pr_scratch_exit {
    __u64 at_call;
};
BPF_PERCPU_ARRAY(pr_scratch_exit, struct pr_scratch_exit, 1);

/* pr_id: bpf_get_current_pid_tgid(), read once by the thunk */
static __always_inline int pr_body_exit(struct pr_args_exit *a, __u64 pr_id)
{
    __u32 pr_pid = pr_id >> 32;
    __u32 pr_tid = (__u32)pr_id;
    __u64 pr_ts = bpf_ktime_get_ns();
    char pr_comm[16] __attribute__((aligned(8)));
    pr_current_comm(pr_comm);
    __u32 pr_zero = 0;
    struct pr_scratch_exit *sc = pr_scratch_exit.lookup(&pr_zero);
    if (!sc)
        return 0;
    do {
        struct pr_span_lkey pr_lkey_call_e = {};
        pr_lkey_call_e.k = pr_id;
        __u64 pr_open_call = 0;
        __u64 *pr_dp_call = pr_spandepth_call.lookup(&pr_lkey_call_e);
        if (pr_dp_call)
            pr_open_call = *pr_dp_call;
        __u64 pr_m0_call = (__u64)(((__s64)(a->v2)));
        __u64 pr_m1_call = pr_str_hash((pr_comm), 16);
        __u64 pr_at_call = pr_open_call;
        if (pr_open_call > 16)
            pr_at_call = pr_open_call - 1;  /* past span_depth: nothing kept to compare with */
        else
            for (int pr_i = 0; pr_i < 8; pr_i++) {
                if (pr_i >= pr_open_call)
                    break;
                pr_lkey_call_e.level = pr_open_call - 1 - pr_i;
                struct pr_span_call *pr_o_call = pr_span_call.lookup(&pr_lkey_call_e);
                if (pr_o_call && pr_o_call->m0 == pr_m0_call && (pr_o_call->m1 == pr_m1_call || !pr_o_call->m1 || !pr_m1_call)) {
                    pr_at_call = pr_lkey_call_e.level;
                    break;
                }
            }
        pr_lkey_call_e.level = 0;  /* the key of the open-begin count again */
        sc->at_call = pr_at_call;
        pr_at_call = *(volatile __u64 *)&sc->at_call;  /* the verifier: one walk of what follows */
        __u32 pr_depth_call = pr_at_call;
        do {
            struct pr_rec_0 *ev = pr_events.ringbuf_reserve(sizeof(struct pr_rec_0));
            if (!ev) { pr_lost_record(); break; }
            pr_fill_hdr(&ev->h, 0, pr_id, pr_ts);
            ev->f0 = (__s64)(((__s64)(a->v2)));
            ev->f1 = (__u64)(((__u32)(pr_depth_call)));
            pr_events.ringbuf_submit(ev, pr_wakeup_flags(sizeof(struct pr_rec_0)));
        } while (0);
        do {
            if (pr_at_call == pr_open_call) {  /* an end without its begin: pops nothing */
                pr_count(PR_SPAN_UNMATCHED);
                break;
            }
            if (pr_open_call - 1 - pr_at_call)  /* begins whose end never came */
                pr_count_n(PR_SPAN_DROPPED, pr_open_call - 1 - pr_at_call);
            if (pr_at_call == 0)
                pr_spandepth_call.delete(&pr_lkey_call_e);
            else
                pr_spandepth_call.update(&pr_lkey_call_e, &pr_at_call);
            if (pr_at_call >= 16) break;  /* counted at its begin */
            pr_lkey_call_e.level = pr_at_call;
            struct pr_span_call *pr_bg_call = pr_span_call.lookup(&pr_lkey_call_e);
            if (!pr_bg_call) break;
            __u64 pr_latency_call = pr_ts - pr_bg_call->ts;
            do {
                do {
                    struct pr_rec_1 *ev = pr_events.ringbuf_reserve(sizeof(struct pr_rec_1));
                    if (!ev) { pr_lost_record(); break; }
                    pr_fill_hdr(&ev->h, 1, pr_id, pr_ts);
                    ev->f0 = (__s64)(((__s64)(pr_bg_call->c0)));
                    ev->f1 = (__u64)(((__u32)(pr_depth_call)));
                    ev->f2 = (__u64)(((__u64)(pr_latency_call)));
                    pr_events.ringbuf_submit(ev, pr_wakeup_flags(sizeof(struct pr_rec_1)));
                } while (0);
            } while (0);
            pr_span_call.delete(&pr_lkey_call_e);
        } while (0);
    } while (0);
    return 0;
}

int pr_exit_s0(struct pt_regs *ctx)
{
    __u64 pr_id = bpf_get_current_pid_tgid();
#if !defined(PR_DISPATCHED)
    if (pr_skip(PR_CFG_SCOPE_UPROBE, pr_id))
        return 0;
#endif
    struct pr_args_exit pr_a = {};
    pr_a.v2 = (__s64)ctx->bp;
    return pr_body_exit(&pr_a, pr_id);
}

/* Every uprobe site's thunk, by its slot (the runtime fills it): one uprobe_multi link
   per binary runs pr_uprobe_dispatch at all its sites, each with its slot as the
   attach cookie. A sleepable thunk is never here: a sleepable program cannot use a prog
   array, so it keeps a link of its own. With PR_DISPATCHED (the loader attaches
   uprobes so) the scope check is made here, for every thunk this calls. */
BPF_PROG_ARRAY(pr_uprobe_sites, 2);

int pr_uprobe_dispatch(struct pt_regs *ctx)
{
    if (pr_skip(PR_CFG_SCOPE_UPROBE, bpf_get_current_pid_tgid()))
        return 0;
    pr_uprobe_sites.call(ctx, (__u32)bpf_get_attach_cookie(ctx));
    return 0;  /* an empty slot: a site attached on its own, never through here */
}
