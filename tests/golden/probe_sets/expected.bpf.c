/* planrunner plan: probe-sets -- generated, do not edit */
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


#define PR_RINGBUF_PAGES 1024
BPF_RINGBUF_OUTPUT(pr_events, PR_RINGBUF_PAGES);

/* the same pages as the map above (PAGE_SIZE is what bcc's macro counts in) */
#define PR_RINGBUF_BYTES (PR_RINGBUF_PAGES * PAGE_SIZE)
#define PR_WAKEUP_SHARE 16

/* templates/record_helpers.h: included verbatim */

struct pr_rec_2 {
    struct pr_hdr h;
    __s64 f1;
    __u64 f0_ptr;
    __s64 f0_st;
    char f0[64];
};
_Static_assert(sizeof(struct pr_rec_2) == 128, "record layout (render/layout.py)");

/* an open begin of a nested span: its key, its process (0: any), its depth */
struct pr_span_lkey {
    __u64 k;
    __u64 tgid;
    __u64 level;
};

struct pr_span_call {
    __u64 ts;
};
/* LRU: begins whose end never comes (a thread that died mid-span) are evicted by newer
   ones instead of filling the map. */
BPF_TABLE("lru_hash", struct pr_span_lkey, struct pr_span_call, pr_span_call, 10240);
/* open begins per key (level 0 of the key) */
BPF_TABLE("lru_hash", struct pr_span_lkey, __u64, pr_spandepth_call, 10240);

struct pr_agg_1_key {
    char k0[64];
} __attribute__((aligned(8)));

BPF_PERCPU_HASH(pr_agg_1, struct pr_agg_1_key, __u64, 10240);

BPF_PERCPU_ARRAY(pr_agg_1_lost, __u64, 1);  /* updates refused: map full */

struct pr_agg_0_key {
    char k0[64];
    __u64 slot;
} __attribute__((aligned(8)));

struct pr_agg_0_val {
    __u64 n;
    __u64 sum;
};

BPF_PERCPU_HASH(pr_agg_0, struct pr_agg_0_key, struct pr_agg_0_val, 10240);

BPF_PERCPU_ARRAY(pr_agg_0_lost, __u64, 1);  /* updates refused: map full */

/* `func`: the names of the functions, probes and events that fire, by index (the
   runtime writes them after loading); a thunk sets pr_a.func to one */
#define PR_FUNC_SIZE 64
struct pr_func_name {
    char s[PR_FUNC_SIZE];
};
BPF_ARRAY(pr_func_names, struct pr_func_name, 42);

/* probe entry */
struct pr_args_entry {
    __u64 pr_unused;
    __u64 func;
};
struct pr_scratch_entry {
    struct pr_agg_1_key agg1_key;
    struct pr_span_call pr_span_call;
};
BPF_PERCPU_ARRAY(pr_scratch_entry, struct pr_scratch_entry, 1);

/* pr_id: bpf_get_current_pid_tgid(), read once by the thunk */
static __always_inline int pr_body_entry(struct pr_args_entry *a, __u64 pr_id)
{
    __u32 pr_pid = pr_id >> 32;
    __u32 pr_tid = (__u32)pr_id;
    __u64 pr_ts = bpf_ktime_get_ns();
    char pr_func[PR_FUNC_SIZE] = {};
    {
        __u32 pr_fk = a->func;
        struct pr_func_name *pr_fv = pr_func_names.lookup(&pr_fk);
        if (pr_fv)
            __builtin_memcpy(pr_func, pr_fv->s, PR_FUNC_SIZE);
    }
    __u32 pr_zero = 0;
    struct pr_scratch_entry *sc = pr_scratch_entry.lookup(&pr_zero);
    if (!sc)
        return 0;
    do {
        struct pr_span_lkey pr_lkey_call_b = {};
        pr_lkey_call_b.k = (__u64)(((__u32)(pr_tid)));
        pr_lkey_call_b.tgid = pr_pid;
        __u64 pr_open_call = 0;
        __u64 *pr_dp_call = pr_spandepth_call.lookup(&pr_lkey_call_b);
        if (pr_dp_call)
            pr_open_call = *pr_dp_call;
        __u32 pr_depth_call = pr_open_call;
        do {
            /* output 1: count */
            if (!((!(/* "set_fn_00" */ ((const __u8 *)((pr_func)))[0] == 115 && ((const __u8 *)((pr_func)))[1] == 101 && ((const __u8 *)((pr_func)))[2] == 116 && ((const __u8 *)((pr_func)))[3] == 95 && ((const __u8 *)((pr_func)))[4] == 102 && ((const __u8 *)((pr_func)))[5] == 110 && ((const __u8 *)((pr_func)))[6] == 95 && ((const __u8 *)((pr_func)))[7] == 48 && ((const __u8 *)((pr_func)))[8] == 48 && ((const __u8 *)((pr_func)))[9] == 0)))) break;
            struct pr_agg_1_key *pr_k = &sc->agg1_key;
            __builtin_memset(pr_k, 0, 64);
            bpf_probe_read_kernel_str(pr_k->k0, 64, (pr_func));
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
            __u64 pr_nd = (__u64)pr_depth_call + 1;
            pr_spandepth_call.update(&pr_lkey_call_b, &pr_nd);
            if (pr_depth_call >= 64) { pr_count(PR_SPAN_OVERFLOW); break; }
            pr_lkey_call_b.level = pr_depth_call;
            struct pr_span_call *bv = &sc->pr_span_call;
            bv->ts = pr_ts;
            pr_span_call.update(&pr_lkey_call_b, bv);
        } while (0);
    } while (0);
    return 0;
}

int pr_entry_s0(struct pt_regs *ctx)
{
    __u64 pr_id = bpf_get_current_pid_tgid();
    if (pr_skip(PR_CFG_SCOPE_UPROBE, pr_id))
        return 0;
    struct pr_args_entry pr_a = {};
    pr_a.func = bpf_get_attach_cookie(ctx);
    return pr_body_entry(&pr_a, pr_id);
}

/* probe ret */
struct pr_args_ret {
    __u64 pr_unused;
    __u64 func;
};
struct pr_scratch_ret {
    struct pr_agg_0_key agg0_key;
};
BPF_PERCPU_ARRAY(pr_scratch_ret, struct pr_scratch_ret, 1);

/* pr_id: bpf_get_current_pid_tgid(), read once by the thunk */
static __always_inline int pr_body_ret(struct pr_args_ret *a, __u64 pr_id)
{
    __u32 pr_pid = pr_id >> 32;
    __u32 pr_tid = (__u32)pr_id;
    __u64 pr_ts = bpf_ktime_get_ns();
    char pr_func[PR_FUNC_SIZE] = {};
    {
        __u32 pr_fk = a->func;
        struct pr_func_name *pr_fv = pr_func_names.lookup(&pr_fk);
        if (pr_fv)
            __builtin_memcpy(pr_func, pr_fv->s, PR_FUNC_SIZE);
    }
    __u32 pr_zero = 0;
    struct pr_scratch_ret *sc = pr_scratch_ret.lookup(&pr_zero);
    if (!sc)
        return 0;
    do {
        struct pr_span_lkey pr_lkey_call_e = {};
        pr_lkey_call_e.k = (__u64)(((__u32)(pr_tid)));
        pr_lkey_call_e.tgid = pr_pid;
        __u64 pr_open_call = 0;
        __u64 *pr_dp_call = pr_spandepth_call.lookup(&pr_lkey_call_e);
        if (pr_dp_call)
            pr_open_call = *pr_dp_call;
        __u32 pr_depth_call = pr_open_call ? pr_open_call - 1 : 0;
        do {
            if (!pr_open_call) break;  /* no open begin: it began before tracing */
            if (pr_depth_call == 0)
                pr_spandepth_call.delete(&pr_lkey_call_e);
            else {
                __u64 pr_nd = pr_depth_call;
                pr_spandepth_call.update(&pr_lkey_call_e, &pr_nd);
            }
            if (pr_depth_call >= 64) break;  /* counted at its begin */
            pr_lkey_call_e.level = pr_depth_call;
            struct pr_span_call *pr_bg_call = pr_span_call.lookup(&pr_lkey_call_e);
            if (!pr_bg_call) break;
            __u64 pr_latency_call = pr_ts - pr_bg_call->ts;
            do {
                do {
                    /* output 0: hist */
                    struct pr_agg_0_key *pr_k = &sc->agg0_key;
                    __builtin_memset(pr_k, 0, 72);
                    bpf_probe_read_kernel_str(pr_k->k0, 64, (pr_func));
                    __u64 pr_x = (__u64)(((__u64)(pr_latency_call)));
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
            pr_span_call.delete(&pr_lkey_call_e);
        } while (0);
    } while (0);
    return 0;
}

int pr_ret_s0(struct pt_regs *ctx)
{
    __u64 pr_id = bpf_get_current_pid_tgid();
    if (pr_skip(PR_CFG_SCOPE_UPROBE, pr_id))
        return 0;
    struct pr_args_ret pr_a = {};
    pr_a.func = bpf_get_attach_cookie(ctx);
    return pr_body_ret(&pr_a, pr_id);
}

/* probe rec */
struct pr_args_rec {
    __u64 pr_unused;
    __s64 v2;
    __u64 func;
};

/* pr_id: bpf_get_current_pid_tgid(), read once by the thunk */
static __always_inline int pr_body_rec(struct pr_args_rec *a, __u64 pr_id)
{
    __u32 pr_pid = pr_id >> 32;
    __u32 pr_tid = (__u32)pr_id;
    __u64 pr_ts = bpf_ktime_get_ns();
    char pr_func[PR_FUNC_SIZE] = {};
    {
        __u32 pr_fk = a->func;
        struct pr_func_name *pr_fv = pr_func_names.lookup(&pr_fk);
        if (pr_fv)
            __builtin_memcpy(pr_func, pr_fv->s, PR_FUNC_SIZE);
    }
    do {
        do {
            struct pr_rec_2 *ev = pr_events.ringbuf_reserve(sizeof(struct pr_rec_2));
            if (!ev) { pr_lost_record(); break; }
            pr_fill_hdr(&ev->h, 2, pr_id, pr_ts);
            ev->f0_ptr = 0;
            ev->f0_st = PR_STR_OK;
            bpf_probe_read_kernel_str(ev->f0, 64, (pr_func));
            ev->f1 = (__s64)(((__s64)(a->v2)));
            pr_events.ringbuf_submit(ev, pr_wakeup_flags(sizeof(struct pr_rec_2)));
        } while (0);
    } while (0);
    return 0;
}

int pr_rec_s0(struct pt_regs *ctx)
{
    __u64 pr_id = bpf_get_current_pid_tgid();
#if !defined(PR_DISPATCHED)
    if (pr_skip(PR_CFG_SCOPE_UPROBE, pr_id))
        return 0;
#endif
    if (pr_ring_full(128))
        return 0;  /* counted lost before reading anything for it */
    struct pr_args_rec pr_a = {};
    pr_a.v2 = (__s64)ctx->bp;
    pr_a.func = 40;
    return pr_body_rec(&pr_a, pr_id);
}

int pr_rec_s1(struct pt_regs *ctx)
{
    __u64 pr_id = bpf_get_current_pid_tgid();
#if !defined(PR_DISPATCHED)
    if (pr_skip(PR_CFG_SCOPE_UPROBE, pr_id))
        return 0;
#endif
    if (pr_ring_full(128))
        return 0;  /* counted lost before reading anything for it */
    struct pr_args_rec pr_a = {};
    pr_a.v2 = (__s64)ctx->bp;
    pr_a.func = 41;
    return pr_body_rec(&pr_a, pr_id);
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
