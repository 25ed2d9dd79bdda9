/* planrunner plan: profile -- generated, do not edit */
/* struct pt_regs only: <linux/sched.h> and <uapi/linux/ptrace.h> doubled clang's time */
#include <asm/ptrace.h>
#include <uapi/linux/bpf_perf_event.h>

/* templates/runtime_helpers.h: included verbatim */


#define PR_RINGBUF_PAGES 256
BPF_RINGBUF_OUTPUT(pr_events, PR_RINGBUF_PAGES);

/* the same pages as the map above (PAGE_SIZE is what bcc's macro counts in) */
#define PR_RINGBUF_BYTES (PR_RINGBUF_PAGES * PAGE_SIZE)
#define PR_WAKEUP_SHARE 16

/* templates/record_helpers.h: included verbatim */

struct pr_kstacks_val {
    __u64 ip[32];
};
BPF_TABLE("stacktrace", int, struct pr_kstacks_val, pr_kstacks, 4096);

BPF_TABLE("lru_hash", __u32, __u8, pr_seen, 16384);

struct pr_ucopies_val {
    __u32 pid;
    __u32 len;
    __u64 time;
    __u64 regs[4];
    char data[16384];
};
BPF_HASH(pr_ucopies, __u64, struct pr_ucopies_val, 2048);

struct pr_agg_0_key {
    char k0[16];
    __s64 k1;
    __s64 k2;
    __u64 k2_pid;
} __attribute__((aligned(8)));

BPF_PERCPU_HASH(pr_agg_0, struct pr_agg_0_key, __u64, 10240);

BPF_PERCPU_ARRAY(pr_agg_0_lost, __u64, 1);  /* updates refused: map full */

struct pr_agg_1_key {
    __u64 pr_none;
} __attribute__((aligned(8)));

BPF_PERCPU_HASH(pr_agg_1, struct pr_agg_1_key, __u64, 10240);

BPF_PERCPU_ARRAY(pr_agg_1_lost, __u64, 1);  /* updates refused: map full */

/* probe cpu */
struct pr_args_cpu {
    __u64 pr_unused;
    __u64 u_regs[3];  /* ip, sp, bp at the event */
    __s64 kstack;
};
struct pr_scratch_cpu {
    struct pr_agg_0_key agg0_key;
    struct pr_ucopies_val agg0_uc2;
};
BPF_PERCPU_ARRAY(pr_scratch_cpu, struct pr_scratch_cpu, 1);

static __always_inline int pr_body_cpu(struct pr_args_cpu *a)
{
    __u64 pr_id = bpf_get_current_pid_tgid();
    __u32 pr_pid = pr_id >> 32;
    __u32 pr_tid = (__u32)pr_id;
    char pr_comm[16] = {};
    bpf_get_current_comm(pr_comm, sizeof(pr_comm));
    __u32 pr_zero = 0;
    struct pr_scratch_cpu *sc = pr_scratch_cpu.lookup(&pr_zero);
    if (!sc)
        return 0;
    do {
        if (!((((__s64)((__u32)(pr_pid))) != 0LL))) break;
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
            /* output 0: count */
            struct pr_agg_0_key *pr_k = &sc->agg0_key;
            __builtin_memset(pr_k, 0, 40);
            bpf_probe_read_kernel_str(pr_k->k0, 16, (pr_comm));
            pr_k->k1 = (a->kstack);
            if (pr_k->k1 < 0 && pr_k->k1 != -EFAULT)
                pr_count(PR_STACK_LOST);  /* -EFAULT: no such stack here */
            struct pr_ucopies_val *pr_uc2 = &sc->agg0_uc2;
            pr_uc2->pid = pr_id >> 32;
            pr_uc2->time = bpf_ktime_get_ns();  /* where it falls among maps changes */
            pr_uc2->regs[0] = a->u_regs[0];
            pr_uc2->regs[1] = a->u_regs[1];
            pr_uc2->regs[2] = a->u_regs[2];
            pr_uc2->regs[3] = 0;
            if (bpf_probe_read_user(pr_uc2->data, 16384, (void *)a->u_regs[1]) == 0) {
                pr_uc2->len = 16384;
            } else {
                __u32 pr_got = 0;
                if (pr_got <= 8192 && bpf_probe_read_user(pr_uc2->data + pr_got, 8192, (void *)(a->u_regs[1] + pr_got)) == 0)
                    pr_got += 8192;
                if (pr_got <= 12288 && bpf_probe_read_user(pr_uc2->data + pr_got, 4096, (void *)(a->u_regs[1] + pr_got)) == 0)
                    pr_got += 4096;
                if (pr_got <= 14336 && bpf_probe_read_user(pr_uc2->data + pr_got, 2048, (void *)(a->u_regs[1] + pr_got)) == 0)
                    pr_got += 2048;
                if (pr_got <= 15360 && bpf_probe_read_user(pr_uc2->data + pr_got, 1024, (void *)(a->u_regs[1] + pr_got)) == 0)
                    pr_got += 1024;
                if (pr_got <= 15872 && bpf_probe_read_user(pr_uc2->data + pr_got, 512, (void *)(a->u_regs[1] + pr_got)) == 0)
                    pr_got += 512;
                if (pr_got <= 16128 && bpf_probe_read_user(pr_uc2->data + pr_got, 256, (void *)(a->u_regs[1] + pr_got)) == 0)
                    pr_got += 256;
                pr_uc2->len = pr_got;
            }
            __u64 pr_h2 = 0xcbf29ce484222325ULL ^ pr_uc2->len;
            pr_h2 = (pr_h2 ^ pr_uc2->regs[0]) * 0x100000001b3ULL;
            pr_h2 = (pr_h2 ^ pr_uc2->regs[1]) * 0x100000001b3ULL;
            pr_h2 = (pr_h2 ^ pr_uc2->regs[2]) * 0x100000001b3ULL;
            for (__u32 pr_i = 0; pr_i < 256; pr_i++) {
                if (pr_i * 64 + 64 > pr_uc2->len)
                    break;
                __u64 *pr_w = (__u64 *)(pr_uc2->data + pr_i * 64);
                pr_h2 = (pr_h2 ^ pr_w[0]) * 0x100000001b3ULL;
                pr_h2 = (pr_h2 ^ pr_w[1]) * 0x100000001b3ULL;
                pr_h2 = (pr_h2 ^ pr_w[2]) * 0x100000001b3ULL;
                pr_h2 = (pr_h2 ^ pr_w[3]) * 0x100000001b3ULL;
                pr_h2 = (pr_h2 ^ pr_w[4]) * 0x100000001b3ULL;
                pr_h2 = (pr_h2 ^ pr_w[5]) * 0x100000001b3ULL;
                pr_h2 = (pr_h2 ^ pr_w[6]) * 0x100000001b3ULL;
                pr_h2 = (pr_h2 ^ pr_w[7]) * 0x100000001b3ULL;
            }
            if (!pr_h2)
                pr_h2 = 1;  /* 0 means: no stack */
            if (!pr_ucopies.lookup(&pr_h2) && pr_ucopies.update(&pr_h2, pr_uc2)) {
                pr_count(PR_STACK_LOST);
                pr_h2 = 0;
            }
            pr_k->k2 = (__s64)pr_h2;
            pr_k->k2_pid = pr_id >> 32;
            __u64 pr_init = 0;
            __u64 *pr_v = pr_agg_0.lookup_or_try_init(pr_k, &pr_init);
            if (!pr_v) {
                pr_count(PR_LOST_MAPFULL);
                __u32 pr_lk = 0;
                __u64 *pr_lost = pr_agg_0_lost.lookup(&pr_lk);
                if (pr_lost)
                    *pr_lost += 1;
                break;
            }
            *pr_v += 1;
        } while (0);
    } while (0);
    return 0;
}

int pr_cpu_perf(struct bpf_perf_event_data *ctx)
{
    if (pr_skip(PR_CFG_SCOPE_TRACEPOINT))
        return 0;
    struct pr_args_cpu pr_a = {};
    struct pt_regs pr_ur = {};
    bpf_probe_read_kernel(&pr_ur, sizeof(pr_ur), (void *)bpf_task_pt_regs(bpf_get_current_task_btf()));
    pr_a.u_regs[0] = pr_ur.ip;
    pr_a.u_regs[1] = pr_ur.sp;
    pr_a.u_regs[2] = pr_ur.bp;
    pr_a.kstack = pr_kstacks.get_stackid(ctx, 0);
    return pr_body_cpu(&pr_a);
}

/* probe tick */
struct pr_args_tick {
    __u64 pr_unused;
};

static __always_inline int pr_body_tick(struct pr_args_tick *a)
{
    __u64 pr_id = bpf_get_current_pid_tgid();
    __u32 pr_pid = pr_id >> 32;
    __u32 pr_tid = (__u32)pr_id;
    do {
        do {
            /* output 1: count */
            struct pr_agg_1_key pr_kv = {};
            struct pr_agg_1_key *pr_k = &pr_kv;
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

int pr_tick_perf(struct bpf_perf_event_data *ctx)
{
    struct pr_args_tick pr_a = {};
    return pr_body_tick(&pr_a);
}
