/* planrunner plan: stack-dwarf -- generated, do not edit */
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

/* templates/runtime_helpers.h: included verbatim */


#define PR_RINGBUF_PAGES 8192
BPF_RINGBUF_OUTPUT(pr_events, PR_RINGBUF_PAGES);

/* the same pages as the map above (PAGE_SIZE is what bcc's macro counts in) */
#define PR_RINGBUF_BYTES (PR_RINGBUF_PAGES * PAGE_SIZE)
#define PR_WAKEUP_SHARE 16

/* templates/record_helpers.h: included verbatim */

struct pr_rec_0 {
    struct pr_hdr h;
    __u32 f0_pid;
    __u32 f0_len;
    __u64 f0_time;
    __u64 f0_regs[4];
    char f0_data[4096];
};
_Static_assert(sizeof(struct pr_rec_0) == 4184, "record layout (render/layout.py)");

BPF_TABLE("lru_hash", __u32, __u8, pr_seen, 16384);

struct pr_ucopies_val {
    __u32 pid;
    __u32 len;
    __u64 time;
    __u64 regs[4];
    char data[4096];
};
BPF_HASH(pr_ucopies, __u64, struct pr_ucopies_val, 2048);

struct pr_agg_1_key {
    __s64 k0;
    __u64 k0_pid;
} __attribute__((aligned(8)));

BPF_PERCPU_HASH(pr_agg_1, struct pr_agg_1_key, __u64, 10240);

BPF_PERCPU_ARRAY(pr_agg_1_lost, __u64, 1);  /* updates refused: map full */

/* probe value */
struct pr_args_value {
    __u64 pr_unused;
    __u64 u_regs[3];  /* ip, sp, bp at the event */
};
struct pr_scratch_value {
    struct pr_ucopies_val agg1_uc0;
};
BPF_PERCPU_ARRAY(pr_scratch_value, struct pr_scratch_value, 1);

static __always_inline int pr_body_value(struct pr_args_value *a)
{
    __u64 pr_id = bpf_get_current_pid_tgid();
    __u32 pr_pid = pr_id >> 32;
    __u32 pr_tid = (__u32)pr_id;
    __u64 pr_ts = bpf_ktime_get_ns();
    __u32 pr_zero = 0;
    struct pr_scratch_value *sc = pr_scratch_value.lookup(&pr_zero);
    if (!sc)
        return 0;
    do {
        {  /* a process seen for the first time: wake the reader now */
            __u32 pr_tgid = pr_id >> 32;
            if (!pr_seen.lookup(&pr_tgid)) {
                __u8 pr_one = 1;
                pr_seen.update(&pr_tgid, &pr_one);
                struct pr_hdr *pr_n = pr_events.ringbuf_reserve(sizeof(struct pr_hdr));
                if (pr_n) {
                    pr_fill_hdr(pr_n, 0xffffffff, pr_id, 0);
                    pr_events.ringbuf_submit(pr_n, BPF_RB_FORCE_WAKEUP);
                }
            }
        }
        do {
            struct pr_rec_0 *ev = pr_events.ringbuf_reserve(sizeof(struct pr_rec_0));
            if (!ev) { pr_count(PR_LOST_RINGBUF); break; }
            pr_fill_hdr(&ev->h, 0, pr_id, pr_ts);
            ev->f0_pid = pr_id >> 32;
            ev->f0_time = bpf_ktime_get_ns();  /* where it falls among maps changes */
            ev->f0_regs[0] = a->u_regs[0];
            ev->f0_regs[1] = a->u_regs[1];
            ev->f0_regs[2] = a->u_regs[2];
            ev->f0_regs[3] = 0;
            if (bpf_probe_read_user(ev->f0_data, 4096, (void *)a->u_regs[1]) == 0) {
                ev->f0_len = 4096;
            } else {
                __u32 pr_got = 0;
                if (pr_got <= 2048 && bpf_probe_read_user(ev->f0_data + pr_got, 2048, (void *)(a->u_regs[1] + pr_got)) == 0)
                    pr_got += 2048;
                if (pr_got <= 3072 && bpf_probe_read_user(ev->f0_data + pr_got, 1024, (void *)(a->u_regs[1] + pr_got)) == 0)
                    pr_got += 1024;
                if (pr_got <= 3584 && bpf_probe_read_user(ev->f0_data + pr_got, 512, (void *)(a->u_regs[1] + pr_got)) == 0)
                    pr_got += 512;
                if (pr_got <= 3840 && bpf_probe_read_user(ev->f0_data + pr_got, 256, (void *)(a->u_regs[1] + pr_got)) == 0)
                    pr_got += 256;
                ev->f0_len = pr_got;
            }
            pr_events.ringbuf_submit(ev, pr_wakeup_flags(sizeof(struct pr_rec_0)));
        } while (0);
        do {
            /* output 1: count */
            struct pr_agg_1_key pr_kv = {};
            struct pr_agg_1_key *pr_k = &pr_kv;
            struct pr_ucopies_val *pr_uc0 = &sc->agg1_uc0;
            pr_uc0->pid = pr_id >> 32;
            pr_uc0->time = bpf_ktime_get_ns();  /* where it falls among maps changes */
            pr_uc0->regs[0] = a->u_regs[0];
            pr_uc0->regs[1] = a->u_regs[1];
            pr_uc0->regs[2] = a->u_regs[2];
            pr_uc0->regs[3] = 0;
            if (bpf_probe_read_user(pr_uc0->data, 4096, (void *)a->u_regs[1]) == 0) {
                pr_uc0->len = 4096;
            } else {
                __u32 pr_got = 0;
                if (pr_got <= 2048 && bpf_probe_read_user(pr_uc0->data + pr_got, 2048, (void *)(a->u_regs[1] + pr_got)) == 0)
                    pr_got += 2048;
                if (pr_got <= 3072 && bpf_probe_read_user(pr_uc0->data + pr_got, 1024, (void *)(a->u_regs[1] + pr_got)) == 0)
                    pr_got += 1024;
                if (pr_got <= 3584 && bpf_probe_read_user(pr_uc0->data + pr_got, 512, (void *)(a->u_regs[1] + pr_got)) == 0)
                    pr_got += 512;
                if (pr_got <= 3840 && bpf_probe_read_user(pr_uc0->data + pr_got, 256, (void *)(a->u_regs[1] + pr_got)) == 0)
                    pr_got += 256;
                pr_uc0->len = pr_got;
            }
            __u64 pr_h0 = 0xcbf29ce484222325ULL ^ pr_uc0->len;
            pr_h0 = (pr_h0 ^ pr_uc0->regs[0]) * 0x100000001b3ULL;
            pr_h0 = (pr_h0 ^ pr_uc0->regs[1]) * 0x100000001b3ULL;
            pr_h0 = (pr_h0 ^ pr_uc0->regs[2]) * 0x100000001b3ULL;
            for (__u32 pr_i = 0; pr_i < 64; pr_i++) {
                if (pr_i * 64 + 64 > pr_uc0->len)
                    break;
                __u64 *pr_w = (__u64 *)(pr_uc0->data + pr_i * 64);
                pr_h0 = (pr_h0 ^ pr_w[0]) * 0x100000001b3ULL;
                pr_h0 = (pr_h0 ^ pr_w[1]) * 0x100000001b3ULL;
                pr_h0 = (pr_h0 ^ pr_w[2]) * 0x100000001b3ULL;
                pr_h0 = (pr_h0 ^ pr_w[3]) * 0x100000001b3ULL;
                pr_h0 = (pr_h0 ^ pr_w[4]) * 0x100000001b3ULL;
                pr_h0 = (pr_h0 ^ pr_w[5]) * 0x100000001b3ULL;
                pr_h0 = (pr_h0 ^ pr_w[6]) * 0x100000001b3ULL;
                pr_h0 = (pr_h0 ^ pr_w[7]) * 0x100000001b3ULL;
            }
            if (!pr_h0)
                pr_h0 = 1;  /* 0 means: no stack */
            if (!pr_ucopies.lookup(&pr_h0) && pr_ucopies.update(&pr_h0, pr_uc0)) {
                pr_count(PR_STACK_LOST);
                pr_h0 = 0;
            }
            pr_k->k0 = (__s64)pr_h0;
            pr_k->k0_pid = pr_id >> 32;
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
    } while (0);
    return 0;
}

int pr_value_s0(struct pt_regs *ctx)
{
    if (pr_skip(PR_CFG_SCOPE_UPROBE))
        return 0;
    struct pr_args_value pr_a = {};
    pr_a.u_regs[0] = ctx->ip;
    pr_a.u_regs[1] = ctx->sp;
    pr_a.u_regs[2] = ctx->bp;
    return pr_body_value(&pr_a);
}

/* Every uprobe site's thunk, by its slot (the runtime fills it): one uprobe_multi link
   per binary runs pr_uprobe_dispatch at all its sites, each with its slot as the
   attach cookie. A sleepable thunk is never here: a sleepable program cannot use a prog
   array, so it keeps a link of its own. */
BPF_PROG_ARRAY(pr_uprobe_sites, 1);

int pr_uprobe_dispatch(struct pt_regs *ctx)
{
    pr_uprobe_sites.call(ctx, (__u32)bpf_get_attach_cookie(ctx));
    return 0;  /* an empty slot: a site attached on its own, never through here */
}
