/* planrunner plan: string-literals -- generated, do not edit */
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

#define PR_RINGBUF_PAGES 2048
BPF_RINGBUF_OUTPUT(pr_events, PR_RINGBUF_PAGES);

/* the same pages as the map above (PAGE_SIZE is what bcc's macro counts in) */
#define PR_RINGBUF_BYTES (PR_RINGBUF_PAGES * PAGE_SIZE)
#define PR_WAKEUP_SHARE 16

/* templates/record_helpers.h: included verbatim */

struct pr_rec_0 {
    struct pr_hdr h;
    __u64 f0;
    __u64 f1_ptr;
    __s64 f1_st;
    char f1[129];
    char f1_pad[7];
    __u64 f2_ptr;
    __s64 f2_st;
    char f2[81];
    char f2_pad[7];
};
_Static_assert(sizeof(struct pr_rec_0) == 304, "record layout (render/layout.py)");

struct pr_agg_1_key {
    char k0[16];
    char k1[136];
} __attribute__((aligned(8)));

BPF_PERCPU_HASH(pr_agg_1, struct pr_agg_1_key, __u64, 10240);

BPF_PERCPU_ARRAY(pr_agg_1_lost, __u64, 1);  /* updates refused: map full */

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
    char t0[8];
    char t1[81];
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
        /* "/users/" */
        sc->t0[0] = 47; sc->t0[1] = 117; sc->t0[2] = 115; sc->t0[3] = 101; sc->t0[4] = 114; sc->t0[5] = 115; sc->t0[6] = 47; sc->t0[7] = 0;
        if (!(((/* "/api/vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv" */ ((const __u8 *)((sc->s2)))[0] == 47 && ((const __u8 *)((sc->s2)))[1] == 97 && ((const __u8 *)((sc->s2)))[2] == 112 && ((const __u8 *)((sc->s2)))[3] == 105 && ((const __u8 *)((sc->s2)))[4] == 47 && ((const __u8 *)((sc->s2)))[5] == 118 && ((const __u8 *)((sc->s2)))[6] == 118 && ((const __u8 *)((sc->s2)))[7] == 118 && ((const __u8 *)((sc->s2)))[8] == 118 && ((const __u8 *)((sc->s2)))[9] == 118 && ((const __u8 *)((sc->s2)))[10] == 118 && ((const __u8 *)((sc->s2)))[11] == 118 && ((const __u8 *)((sc->s2)))[12] == 118 && ((const __u8 *)((sc->s2)))[13] == 118 && ((const __u8 *)((sc->s2)))[14] == 118 && ((const __u8 *)((sc->s2)))[15] == 118 && ((const __u8 *)((sc->s2)))[16] == 118 && ((const __u8 *)((sc->s2)))[17] == 118 && ((const __u8 *)((sc->s2)))[18] == 118 && ((const __u8 *)((sc->s2)))[19] == 118 && ((const __u8 *)((sc->s2)))[20] == 118 && ((const __u8 *)((sc->s2)))[21] == 118 && ((const __u8 *)((sc->s2)))[22] == 118 && ((const __u8 *)((sc->s2)))[23] == 118 && ((const __u8 *)((sc->s2)))[24] == 118 && ((const __u8 *)((sc->s2)))[25] == 118 && ((const __u8 *)((sc->s2)))[26] == 118 && ((const __u8 *)((sc->s2)))[27] == 118 && ((const __u8 *)((sc->s2)))[28] == 118 && ((const __u8 *)((sc->s2)))[29] == 118 && ((const __u8 *)((sc->s2)))[30] == 118 && ((const __u8 *)((sc->s2)))[31] == 118 && ((const __u8 *)((sc->s2)))[32] == 118 && ((const __u8 *)((sc->s2)))[33] == 118 && ((const __u8 *)((sc->s2)))[34] == 118 && ((const __u8 *)((sc->s2)))[35] == 118 && ((const __u8 *)((sc->s2)))[36] == 118 && ((const __u8 *)((sc->s2)))[37] == 118 && ((const __u8 *)((sc->s2)))[38] == 118 && ((const __u8 *)((sc->s2)))[39] == 118 && ((const __u8 *)((sc->s2)))[40] == 118 && ((const __u8 *)((sc->s2)))[41] == 118 && ((const __u8 *)((sc->s2)))[42] == 118 && ((const __u8 *)((sc->s2)))[43] == 118 && ((const __u8 *)((sc->s2)))[44] == 118 && ((const __u8 *)((sc->s2)))[45] == 118 && ((const __u8 *)((sc->s2)))[46] == 118 && ((const __u8 *)((sc->s2)))[47] == 118 && ((const __u8 *)((sc->s2)))[48] == 118 && ((const __u8 *)((sc->s2)))[49] == 118 && ((const __u8 *)((sc->s2)))[50] == 118 && ((const __u8 *)((sc->s2)))[51] == 118 && ((const __u8 *)((sc->s2)))[52] == 118 && ((const __u8 *)((sc->s2)))[53] == 118 && ((const __u8 *)((sc->s2)))[54] == 118 && ((const __u8 *)((sc->s2)))[55] == 118 && ((const __u8 *)((sc->s2)))[56] == 118 && ((const __u8 *)((sc->s2)))[57] == 118 && ((const __u8 *)((sc->s2)))[58] == 118 && ((const __u8 *)((sc->s2)))[59] == 118 && ((const __u8 *)((sc->s2)))[60] == 118 && ((const __u8 *)((sc->s2)))[61] == 118 && ((const __u8 *)((sc->s2)))[62] == 118 && ((const __u8 *)((sc->s2)))[63] == 118 && ((const __u8 *)((sc->s2)))[64] == 118 && ((const __u8 *)((sc->s2)))[65] == 118 && ((const __u8 *)((sc->s2)))[66] == 118 && ((const __u8 *)((sc->s2)))[67] == 118 && ((const __u8 *)((sc->s2)))[68] == 118 && ((const __u8 *)((sc->s2)))[69] == 118 && ((const __u8 *)((sc->s2)))[70] == 118 && ((const __u8 *)((sc->s2)))[71] == 118 && ((const __u8 *)((sc->s2)))[72] == 118 && ((const __u8 *)((sc->s2)))[73] == 118 && ((const __u8 *)((sc->s2)))[74] == 118 && ((const __u8 *)((sc->s2)))[75] == 0) || ((!(/* "/xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" */ ((const __u8 *)((sc->s2)))[0] == 47 && ((const __u8 *)((sc->s2)))[1] == 120 && ((const __u8 *)((sc->s2)))[2] == 120 && ((const __u8 *)((sc->s2)))[3] == 120 && ((const __u8 *)((sc->s2)))[4] == 120 && ((const __u8 *)((sc->s2)))[5] == 120 && ((const __u8 *)((sc->s2)))[6] == 120 && ((const __u8 *)((sc->s2)))[7] == 120 && ((const __u8 *)((sc->s2)))[8] == 120 && ((const __u8 *)((sc->s2)))[9] == 120 && ((const __u8 *)((sc->s2)))[10] == 120 && ((const __u8 *)((sc->s2)))[11] == 120 && ((const __u8 *)((sc->s2)))[12] == 120 && ((const __u8 *)((sc->s2)))[13] == 120 && ((const __u8 *)((sc->s2)))[14] == 120 && ((const __u8 *)((sc->s2)))[15] == 120 && ((const __u8 *)((sc->s2)))[16] == 120 && ((const __u8 *)((sc->s2)))[17] == 120 && ((const __u8 *)((sc->s2)))[18] == 120 && ((const __u8 *)((sc->s2)))[19] == 120 && ((const __u8 *)((sc->s2)))[20] == 120 && ((const __u8 *)((sc->s2)))[21] == 120 && ((const __u8 *)((sc->s2)))[22] == 120 && ((const __u8 *)((sc->s2)))[23] == 120 && ((const __u8 *)((sc->s2)))[24] == 120 && ((const __u8 *)((sc->s2)))[25] == 120 && ((const __u8 *)((sc->s2)))[26] == 120 && ((const __u8 *)((sc->s2)))[27] == 120 && ((const __u8 *)((sc->s2)))[28] == 120 && ((const __u8 *)((sc->s2)))[29] == 120 && ((const __u8 *)((sc->s2)))[30] == 120 && ((const __u8 *)((sc->s2)))[31] == 120 && ((const __u8 *)((sc->s2)))[32] == 120 && ((const __u8 *)((sc->s2)))[33] == 120 && ((const __u8 *)((sc->s2)))[34] == 120 && ((const __u8 *)((sc->s2)))[35] == 120 && ((const __u8 *)((sc->s2)))[36] == 120 && ((const __u8 *)((sc->s2)))[37] == 120 && ((const __u8 *)((sc->s2)))[38] == 120 && ((const __u8 *)((sc->s2)))[39] == 120 && ((const __u8 *)((sc->s2)))[40] == 120 && ((const __u8 *)((sc->s2)))[41] == 120 && ((const __u8 *)((sc->s2)))[42] == 120 && ((const __u8 *)((sc->s2)))[43] == 120 && ((const __u8 *)((sc->s2)))[44] == 120 && ((const __u8 *)((sc->s2)))[45] == 120 && ((const __u8 *)((sc->s2)))[46] == 120 && ((const __u8 *)((sc->s2)))[47] == 120 && ((const __u8 *)((sc->s2)))[48] == 120 && ((const __u8 *)((sc->s2)))[49] == 120 && ((const __u8 *)((sc->s2)))[50] == 120 && ((const __u8 *)((sc->s2)))[51] == 120 && ((const __u8 *)((sc->s2)))[52] == 120 && ((const __u8 *)((sc->s2)))[53] == 120 && ((const __u8 *)((sc->s2)))[54] == 120 && ((const __u8 *)((sc->s2)))[55] == 120 && ((const __u8 *)((sc->s2)))[56] == 120 && ((const __u8 *)((sc->s2)))[57] == 120 && ((const __u8 *)((sc->s2)))[58] == 120 && ((const __u8 *)((sc->s2)))[59] == 120 && ((const __u8 *)((sc->s2)))[60] == 120 && ((const __u8 *)((sc->s2)))[61] == 120 && ((const __u8 *)((sc->s2)))[62] == 120 && ((const __u8 *)((sc->s2)))[63] == 120 && ((const __u8 *)((sc->s2)))[64] == 120 && ((const __u8 *)((sc->s2)))[65] == 120 && ((const __u8 *)((sc->s2)))[66] == 120 && ((const __u8 *)((sc->s2)))[67] == 120 && ((const __u8 *)((sc->s2)))[68] == 120 && ((const __u8 *)((sc->s2)))[69] == 120 && ((const __u8 *)((sc->s2)))[70] == 120 && ((const __u8 *)((sc->s2)))[71] == 120 && ((const __u8 *)((sc->s2)))[72] == 120 && ((const __u8 *)((sc->s2)))[73] == 120 && ((const __u8 *)((sc->s2)))[74] == 120 && ((const __u8 *)((sc->s2)))[75] == 120 && ((const __u8 *)((sc->s2)))[76] == 120 && ((const __u8 *)((sc->s2)))[77] == 120 && ((const __u8 *)((sc->s2)))[78] == 120 && ((const __u8 *)((sc->s2)))[79] == 120 && ((const __u8 *)((sc->s2)))[80] == 120 && ((const __u8 *)((sc->s2)))[81] == 120 && ((const __u8 *)((sc->s2)))[82] == 120 && ((const __u8 *)((sc->s2)))[83] == 120 && ((const __u8 *)((sc->s2)))[84] == 120 && ((const __u8 *)((sc->s2)))[85] == 120 && ((const __u8 *)((sc->s2)))[86] == 120 && ((const __u8 *)((sc->s2)))[87] == 120 && ((const __u8 *)((sc->s2)))[88] == 120 && ((const __u8 *)((sc->s2)))[89] == 120 && ((const __u8 *)((sc->s2)))[90] == 120 && ((const __u8 *)((sc->s2)))[91] == 120 && ((const __u8 *)((sc->s2)))[92] == 120 && ((const __u8 *)((sc->s2)))[93] == 120 && ((const __u8 *)((sc->s2)))[94] == 120 && ((const __u8 *)((sc->s2)))[95] == 120 && ((const __u8 *)((sc->s2)))[96] == 120 && ((const __u8 *)((sc->s2)))[97] == 120 && ((const __u8 *)((sc->s2)))[98] == 120 && ((const __u8 *)((sc->s2)))[99] == 120 && ((const __u8 *)((sc->s2)))[100] == 120 && ((const __u8 *)((sc->s2)))[101] == 120 && ((const __u8 *)((sc->s2)))[102] == 120 && ((const __u8 *)((sc->s2)))[103] == 120 && ((const __u8 *)((sc->s2)))[104] == 120 && ((const __u8 *)((sc->s2)))[105] == 120 && ((const __u8 *)((sc->s2)))[106] == 120 && ((const __u8 *)((sc->s2)))[107] == 120 && ((const __u8 *)((sc->s2)))[108] == 120 && ((const __u8 *)((sc->s2)))[109] == 120 && ((const __u8 *)((sc->s2)))[110] == 120 && ((const __u8 *)((sc->s2)))[111] == 120 && ((const __u8 *)((sc->s2)))[112] == 120 && ((const __u8 *)((sc->s2)))[113] == 120 && ((const __u8 *)((sc->s2)))[114] == 120 && ((const __u8 *)((sc->s2)))[115] == 120 && ((const __u8 *)((sc->s2)))[116] == 120 && ((const __u8 *)((sc->s2)))[117] == 120 && ((const __u8 *)((sc->s2)))[118] == 120 && ((const __u8 *)((sc->s2)))[119] == 120 && ((const __u8 *)((sc->s2)))[120] == 120 && ((const __u8 *)((sc->s2)))[121] == 120 && ((const __u8 *)((sc->s2)))[122] == 120 && ((const __u8 *)((sc->s2)))[123] == 120 && ((const __u8 *)((sc->s2)))[124] == 120 && ((const __u8 *)((sc->s2)))[125] == 120 && ((const __u8 *)((sc->s2)))[126] == 120 && ((const __u8 *)((sc->s2)))[127] == 120 && ((const __u8 *)((sc->s2)))[128] == 0)) && pr_str_contains((sc->s2), 129, sc->t0, 7))))) break;
        do {
            /* "caf\xe9 /api/vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv" */
            sc->t1[0] = 99; sc->t1[1] = 97; sc->t1[2] = 102; sc->t1[3] = (char)233; sc->t1[4] = 32; sc->t1[5] = 47; sc->t1[6] = 97; sc->t1[7] = 112;
            sc->t1[8] = 105; sc->t1[9] = 47; sc->t1[10] = 118; sc->t1[11] = 118; sc->t1[12] = 118; sc->t1[13] = 118; sc->t1[14] = 118; sc->t1[15] = 118;
            sc->t1[16] = 118; sc->t1[17] = 118; sc->t1[18] = 118; sc->t1[19] = 118; sc->t1[20] = 118; sc->t1[21] = 118; sc->t1[22] = 118; sc->t1[23] = 118;
            sc->t1[24] = 118; sc->t1[25] = 118; sc->t1[26] = 118; sc->t1[27] = 118; sc->t1[28] = 118; sc->t1[29] = 118; sc->t1[30] = 118; sc->t1[31] = 118;
            sc->t1[32] = 118; sc->t1[33] = 118; sc->t1[34] = 118; sc->t1[35] = 118; sc->t1[36] = 118; sc->t1[37] = 118; sc->t1[38] = 118; sc->t1[39] = 118;
            sc->t1[40] = 118; sc->t1[41] = 118; sc->t1[42] = 118; sc->t1[43] = 118; sc->t1[44] = 118; sc->t1[45] = 118; sc->t1[46] = 118; sc->t1[47] = 118;
            sc->t1[48] = 118; sc->t1[49] = 118; sc->t1[50] = 118; sc->t1[51] = 118; sc->t1[52] = 118; sc->t1[53] = 118; sc->t1[54] = 118; sc->t1[55] = 118;
            sc->t1[56] = 118; sc->t1[57] = 118; sc->t1[58] = 118; sc->t1[59] = 118; sc->t1[60] = 118; sc->t1[61] = 118; sc->t1[62] = 118; sc->t1[63] = 118;
            sc->t1[64] = 118; sc->t1[65] = 118; sc->t1[66] = 118; sc->t1[67] = 118; sc->t1[68] = 118; sc->t1[69] = 118; sc->t1[70] = 118; sc->t1[71] = 118;
            sc->t1[72] = 118; sc->t1[73] = 118; sc->t1[74] = 118; sc->t1[75] = 118; sc->t1[76] = 118; sc->t1[77] = 118; sc->t1[78] = 118; sc->t1[79] = 118;
            sc->t1[80] = 0;
            struct pr_rec_0 *ev = pr_events.ringbuf_reserve(sizeof(struct pr_rec_0));
            if (!ev) { pr_lost_record(); break; }
            pr_fill_hdr(&ev->h, 0, pr_id, pr_ts);
            ev->f0 = (__u64)(((__u64)(a->v1)));
            ev->f1_ptr = a->v2;
            ev->f1_st = sc->st2;
            bpf_probe_read_kernel_str(ev->f1, 129, (sc->s2));
            ev->f2_ptr = 0;
            ev->f2_st = PR_STR_OK;
            bpf_probe_read_kernel_str(ev->f2, 81, sc->t1);
            pr_events.ringbuf_submit(ev, pr_wakeup_flags(sizeof(struct pr_rec_0)));
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

/* probe tagged */
struct pr_args_tagged {
    __u64 pr_unused;
    __u64 v2;
};
struct pr_scratch_tagged {
    char s2[129];
    __s64 st2;
    __u32 n2;
    struct pr_agg_1_key agg1_key;
    char t0[11];
};
#ifdef PR_SLEEPABLE
/* sleepable: another task may run this probe on this CPU while it waits for a page,
   so its scratch is the task's own, not the CPU's (task storage) */
PR_TASK_STORAGE(pr_scratch_tagged, struct pr_scratch_tagged);
#else
BPF_PERCPU_ARRAY(pr_scratch_tagged, struct pr_scratch_tagged, 1);
#endif

/* pr_id: bpf_get_current_pid_tgid(), read once by the thunk */
static __always_inline int pr_body_tagged(struct pr_args_tagged *a, __u64 pr_id)
{
    __u32 pr_pid = pr_id >> 32;
    __u32 pr_tid = (__u32)pr_id;
#ifdef PR_SLEEPABLE
    struct pr_scratch_tagged *sc = pr_scratch_tagged.task_storage_get(
        bpf_get_current_task_btf(), 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
#else
    __u32 pr_zero = 0;
    struct pr_scratch_tagged *sc = pr_scratch_tagged.lookup(&pr_zero);
#endif
    if (!sc)
        return 0;
    do {
        sc->st2 = pr_read_str(sc->s2, 129, a->v2, PR_FAULT, &sc->n2);
        if (!((/* "/api/v1/users/12345" */ ((const __u8 *)((sc->s2)))[0] == 47 && ((const __u8 *)((sc->s2)))[1] == 97 && ((const __u8 *)((sc->s2)))[2] == 112 && ((const __u8 *)((sc->s2)))[3] == 105 && ((const __u8 *)((sc->s2)))[4] == 47 && ((const __u8 *)((sc->s2)))[5] == 118 && ((const __u8 *)((sc->s2)))[6] == 49 && ((const __u8 *)((sc->s2)))[7] == 47 && ((const __u8 *)((sc->s2)))[8] == 117 && ((const __u8 *)((sc->s2)))[9] == 115 && ((const __u8 *)((sc->s2)))[10] == 101 && ((const __u8 *)((sc->s2)))[11] == 114 && ((const __u8 *)((sc->s2)))[12] == 115 && ((const __u8 *)((sc->s2)))[13] == 47 && ((const __u8 *)((sc->s2)))[14] == 49 && ((const __u8 *)((sc->s2)))[15] == 50 && ((const __u8 *)((sc->s2)))[16] == 51 && ((const __u8 *)((sc->s2)))[17] == 52 && ((const __u8 *)((sc->s2)))[18] == 53))) break;
        do {
            /* output 1: count */
            struct pr_agg_1_key *pr_k = &sc->agg1_key;
            __builtin_memset(pr_k, 0, 152);
            /* "/api/users" */
            sc->t0[0] = 47; sc->t0[1] = 97; sc->t0[2] = 112; sc->t0[3] = 105; sc->t0[4] = 47; sc->t0[5] = 117; sc->t0[6] = 115; sc->t0[7] = 101;
            sc->t0[8] = 114; sc->t0[9] = 115; sc->t0[10] = 0;
            bpf_probe_read_kernel_str(pr_k->k0, 11, sc->t0);
            bpf_probe_read_kernel_str(pr_k->k1, 129, (sc->s2));
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

int pr_tagged_s0(struct pt_regs *ctx)
{
    __u64 pr_id = bpf_get_current_pid_tgid();
#if !defined(PR_DISPATCHED) || defined(PR_SLEEPABLE)
    if (pr_skip(PR_CFG_SCOPE_UPROBE, pr_id))
        return 0;
#endif
    struct pr_args_tagged pr_a = {};
    {
        __u64 _pr_v = 0;
        bpf_probe_read_user(&_pr_v, sizeof(_pr_v), (void *)((__u64)ctx->ax + (__u64)ctx->r12 * 8));
        pr_a.v2 = (__u64)_pr_v;
    }
    return pr_body_tagged(&pr_a, pr_id);
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
