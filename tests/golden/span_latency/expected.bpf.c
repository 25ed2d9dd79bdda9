/* planrunner plan: span-latency -- generated, do not edit */
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
    __s64 f1;
    __u64 f2;
    __u64 f0_ptr;
    __s64 f0_st;
    char f0[129];
    char f0_pad[7];
};
_Static_assert(sizeof(struct pr_rec_0) == 208, "record layout (render/layout.py)");

/* a span key within one process: the same id in two processes is two spans */
struct pr_span_key {
    __u64 k;
    __u64 tgid;
};

struct pr_span_request {
    __u64 ts;
    __u64 c0_ptr;
    __s64 c0_st;
    char c0[129];
};
/* LRU: begins whose end never comes (a thread that died mid-span) are evicted by newer
   ones instead of filling the map. */
BPF_TABLE("lru_hash", struct pr_span_key, struct pr_span_request, pr_span_request, 10240);

/* params read as data: the runtime writes their values after loading, so a run with
   other values reuses this program (render/params.py) */
struct pr_params {
    __u64 p_threshold;
};
BPF_ARRAY(pr_params, struct pr_params, 1);
static __always_inline struct pr_params *pr_params_get(void)
{
    __u32 k = 0;
    return pr_params.lookup(&k);
}
#define PR_PARAM(m) ({ struct pr_params *pr_pv = pr_params_get(); pr_pv ? pr_pv->m : 0; })

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
    struct pr_span_request pr_span_request;
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
        do {
            struct pr_span_key pr_key = {};
            pr_key.k = (__u64)(((__u64)(a->v1)));
            pr_key.tgid = pr_pid;
            struct pr_span_request *bv = &sc->pr_span_request;
            bv->ts = pr_ts;
            bpf_probe_read_kernel(bv->c0, 129, (sc->s2));
            bv->c0_st = sc->st2;
            bv->c0_ptr = a->v2;
            if (pr_span_request.insert(&pr_key, bv)) {
                pr_count(PR_SPAN_REPLACED);
                pr_span_request.update(&pr_key, bv);
            }
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

/* probe done */
struct pr_args_done {
    __u64 pr_unused;
    __u64 v1;
    __s64 v2;
};

/* pr_id: bpf_get_current_pid_tgid(), read once by the thunk */
static __always_inline int pr_body_done(struct pr_args_done *a, __u64 pr_id)
{
    __u32 pr_pid = pr_id >> 32;
    __u32 pr_tid = (__u32)pr_id;
    __u64 pr_ts = bpf_ktime_get_ns();
    do {
        do {
            struct pr_span_key pr_key = {};
            pr_key.k = (__u64)(((__u64)(a->v1)));
            pr_key.tgid = pr_pid;
            struct pr_span_request *pr_bg_request = pr_span_request.lookup(&pr_key);
            if (!pr_bg_request) break;
            __u64 pr_latency_request = pr_ts - pr_bg_request->ts;
            do {
                if (!((((__u64)(pr_latency_request)) >= ((__u64)(PR_PARAM(p_threshold)))))) break;
                do {
                    struct pr_rec_0 *ev = pr_events.ringbuf_reserve(sizeof(struct pr_rec_0));
                    if (!ev) { pr_lost_record(); break; }
                    pr_fill_hdr(&ev->h, 0, pr_id, pr_ts);
                    ev->f0_ptr = pr_bg_request->c0_ptr;
                    ev->f0_st = pr_bg_request->c0_st;
                    bpf_probe_read_kernel_str(ev->f0, 129, (pr_bg_request->c0));
                    ev->f1 = (__s64)(((__s32)(a->v2)));
                    ev->f2 = (__u64)(((__u64)(pr_latency_request)));
                    pr_events.ringbuf_submit(ev, pr_wakeup_flags(sizeof(struct pr_rec_0)));
                } while (0);
            } while (0);
            pr_span_request.delete(&pr_key);
        } while (0);
    } while (0);
    return 0;
}

int pr_done_s0(struct pt_regs *ctx)
{
    __u64 pr_id = bpf_get_current_pid_tgid();
#if !defined(PR_DISPATCHED)
    if (pr_skip(PR_CFG_SCOPE_UPROBE, pr_id))
        return 0;
#endif
    struct pr_args_done pr_a = {};
    pr_a.v1 = (__u64)ctx->bp;
    {
        __s32 _pr_v = 0;
        bpf_probe_read_user(&_pr_v, sizeof(_pr_v), (void *)((__u64)ctx->ax + (__u64)ctx->r12 * 4));
        pr_a.v2 = (__s64)_pr_v;
    }
    return pr_body_done(&pr_a, pr_id);
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
