/* planrunner plan: agg-mixed -- generated, do not edit */
/* struct pt_regs only: <linux/sched.h> and <uapi/linux/ptrace.h> doubled clang's time */
#include <asm/ptrace.h>

/* Helpers every plan program uses (included verbatim by program.bpf.c.j2).
   Coupled with render/layout.py: STR_NULL/STR_OK/STR_TRUNCATED status values. */
#define PR_STR_NULL 0
#define PR_STR_OK 1
#define PR_STR_TRUNCATED 2

/* Filled by the runtime after loading: [PR_CFG_PID] the --pid filter for tracepoints
   (uprobes are filtered by the kernel at attach), [PR_CFG_SELF] planrunner's own process,
   whose events are dropped: tracing the Python that runs planrunner would otherwise feed
   on itself. */
#define PR_CFG_PID 0
#define PR_CFG_SELF 1
BPF_ARRAY(pr_config, __u32, 2);

static __always_inline int pr_skip(int check_pid)
{
    __u32 tgid = bpf_get_current_pid_tgid() >> 32;
    __u32 key = PR_CFG_SELF;
    __u32 *self = pr_config.lookup(&key);
    if (self && *self == tgid)
        return 1;
    if (check_pid) {
        key = PR_CFG_PID;
        __u32 *want = pr_config.lookup(&key);
        if (want && *want && *want != tgid)
            return 1;
    }
    return 0;
}

/* Read a NUL-terminated user string into buf[cap] (content <= cap-1 bytes).
   Returns a status: PR_STR_NULL for a NULL pointer, -errno when unreadable (the
   consumer retries from user space), PR_STR_TRUNCATED when more bytes followed. */
static __always_inline __s64 pr_read_str(char *buf, __u32 cap, __u64 ptr)
{
    if (!ptr) {
        buf[0] = 0;
        return PR_STR_NULL;
    }
    long n = bpf_probe_read_user_str(buf, cap, (void *)ptr);
    if (n < 0) {
        buf[0] = 0;
        return n;
    }
    if (n == cap) {
        char next = 0;
        bpf_probe_read_user(&next, 1, (void *)(ptr + cap - 1));
        if (next)
            return PR_STR_TRUNCATED;
    }
    return PR_STR_OK;
}

/* The same for kernel memory (tracepoint strings). `more`: whether bytes may follow the
   buffer's worth (a __data_loc string) or not (a char[N] field read whole). */
static __always_inline __s64 pr_read_kstr(char *buf, __u32 cap, __u64 ptr, int more)
{
    long n = bpf_probe_read_kernel_str(buf, cap, (void *)ptr);
    if (n < 0) {
        buf[0] = 0;
        return n;
    }
    if (more && n == cap) {
        char next = 0;
        bpf_probe_read_kernel(&next, 1, (void *)(ptr + cap - 1));
        if (next)
            return PR_STR_TRUNCATED;
    }
    return PR_STR_OK;
}

/* Read exactly min(len, cap) bytes (a pointer + length string, not NUL-terminated)
   into buf[cap + 1] and terminate it. */
static __always_inline __s64 pr_read_lstr(char *buf, __u32 cap, __u64 ptr, __s64 len)
{
    if (!ptr) {
        buf[0] = 0;
        return PR_STR_NULL;
    }
    __s64 status = PR_STR_OK;
    if (len < 0)
        len = 0;
    if (len > cap) {
        len = cap;
        status = PR_STR_TRUNCATED;
    }
    __u32 n = len & 0xffff;
    if (n > cap)
        n = cap;
    long err = 0;
    if (n)
        err = bpf_probe_read_user(buf, n, (void *)ptr);
    if (err < 0) {
        buf[0] = 0;
        return err;
    }
    buf[n & 0xffff] = 0;
    return status;
}

/* planrunner expression helpers, called by the C that planrunner/expr/lower_c.py emits.
 *
 * Included verbatim by the program template. Needs __u32/__u64/__s64, __always_inline,
 * bpf_probe_read_user and bpf_probe_read_user_str. Every loop is bounded by a size that is
 * a compile-time constant at each call site, so the BPF verifier can follow it.
 *
 * Strings: a buffer of `bufsize` bytes holds a string that ends at its first NUL (or at
 * the end of the buffer). String literals never contain NUL (the checker refuses them).
 * Every predicate returns 0 or 1.
 */
#ifndef PLANRUNNER_EXPR_HELPERS_H
#define PLANRUNNER_EXPR_HELPERS_H

/* Division as in the BPF ISA: x / 0 == 0 and x % 0 == x. */
static __always_inline __u64 pr_udiv(__u64 a, __u64 b)
{
	return b ? a / b : 0;
}

static __always_inline __u64 pr_umod(__u64 a, __u64 b)
{
	return b ? a % b : a;
}

static __always_inline __u64 pr_abs64(__s64 v)
{
	return v < 0 ? -(__u64)v : (__u64)v;
}

/* Signed division through unsigned division (older BPF targets have no signed divide).
 * Rounds toward zero like C; INT64_MIN / -1 wraps to INT64_MIN instead of trapping. */
static __always_inline __s64 pr_sdiv(__s64 a, __s64 b)
{
	__u64 q;

	if (b == 0)
		return 0;
	q = pr_abs64(a) / pr_abs64(b);
	return (__s64)(((a < 0) != (b < 0)) ? -q : q);
}

/* The remainder takes the dividend's sign, like C. */
static __always_inline __s64 pr_smod(__s64 a, __s64 b)
{
	__u64 r;

	if (b == 0)
		return a;
	r = pr_abs64(a) % pr_abs64(b);
	return (__s64)(a < 0 ? -r : r);
}

/* The string in buf equals the literal lit (litlen bytes). */
static __always_inline int pr_str_eq(const char *buf, int bufsize, const char *lit, int litlen)
{
	int i;

	if (litlen > bufsize)
		return 0;
	for (i = 0; i < litlen; i++)
		if (buf[i] != lit[i])
			return 0;
	return litlen == bufsize || buf[litlen] == 0;
}

/* Two strings held in buffers are equal (compared up to the smaller buffer). */
static __always_inline int pr_strbuf_eq(const char *a, int asize, const char *b, int bsize)
{
	int i;

	for (i = 0; i < asize && i < bsize; i++) {
		if (a[i] != b[i])
			return 0;
		if (a[i] == 0)
			return 1;
	}
	if (i < asize && a[i] != 0)
		return 0;
	if (i < bsize && b[i] != 0)
		return 0;
	return 1;
}

/* The string in buf starts with the literal. */
static __always_inline int pr_str_startswith(const char *buf, int bufsize, const char *lit,
					     int litlen)
{
	int i;

	if (litlen > bufsize)
		return 0;
	for (i = 0; i < litlen; i++)
		if (buf[i] != lit[i])
			return 0;
	return 1;
}

/* The literal occurs in the string in buf (never past its NUL). */
static __always_inline int pr_str_contains(const char *buf, int bufsize, const char *lit,
					   int litlen)
{
	int i, j;

	if (litlen == 0)
		return 1;
	for (i = 0; i + litlen <= bufsize; i++) {
		if (buf[i] == 0)
			return 0;
		for (j = 0; j < litlen; j++)
			if (buf[i + j] != lit[j])
				break;
		if (j == litlen)
			return 1;
	}
	return 0;
}

/* Read exactly min(n, bufsize - 1) bytes (none when n <= 0) from user memory at src into
 * buf, then a NUL after them. The clamp keeps the size provably below bufsize. */
static __always_inline void pr_read_user_n(char *buf, int bufsize, const void *src, __s64 n)
{
	__u32 len = 0;

	if (n > 0)
		len = n < bufsize - 1 ? (__u32)n : (__u32)(bufsize - 1);
	if (len > (__u32)(bufsize - 1))
		len = 0;
	bpf_probe_read_user(buf, len, src);
	buf[len] = 0;
}

#endif /* PLANRUNNER_EXPR_HELPERS_H */

BPF_RINGBUF_OUTPUT(pr_events, 256);

#define PR_WAKEUP_BATCH 64

/* Per-CPU counters: [0] records lost (ring buffer full), [1] aggregation keys dropped
   (map full), [2] submits since the last forced wakeup. */
#define PR_LOST_RINGBUF 0
#define PR_LOST_MAPFULL 1
#define PR_SUBMITS 2
BPF_PERCPU_ARRAY(pr_counters, __u64, 3);

static __always_inline void pr_count(__u32 which)
{
    __u64 *n = pr_counters.lookup(&which);
    if (n)
        *n += 1;
}

/* Wake the consumer once per PR_WAKEUP_BATCH records per CPU; it also drains on a
   short timer, so nothing waits long. One wakeup per record costs ~10x the uprobe. */
static __always_inline __u64 pr_wakeup_flags(void)
{
    __u32 which = PR_SUBMITS;
    __u64 *n = pr_counters.lookup(&which);
    if (!n)
        return 0;
    *n += 1;
    return (*n % PR_WAKEUP_BATCH) == 0 ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
}

struct pr_hdr {
    __u64 ts;
    __u32 output;
    __u32 pid;
    __u32 tid;
    __u32 uid;
    char comm[16];
};
_Static_assert(sizeof(struct pr_hdr) == 40, "pr_hdr layout (render/layout.py)");

static __always_inline void pr_fill_hdr(struct pr_hdr *h, __u32 output, __u64 id, __u64 ts)
{
    h->ts = ts;
    h->output = output;
    h->pid = id >> 32;
    h->tid = (__u32)id;
    h->uid = (__u32)bpf_get_current_uid_gid();
    bpf_get_current_comm(h->comm, sizeof(h->comm));
}

struct pr_rec_0 {
    struct pr_hdr h;
    __s64 f0;
};
_Static_assert(sizeof(struct pr_rec_0) == 48, "record layout (render/layout.py)");

struct pr_agg_1_key {
    char k0[16];
};

BPF_PERCPU_HASH(pr_agg_1, struct pr_agg_1_key, __u64, 10240);

BPF_PERCPU_ARRAY(pr_agg_1_lost, __u64, 1);  /* updates refused: map full */

struct pr_agg_2_key {
    __u64 slot;
};

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

static __always_inline int pr_body_tick(struct pr_args_tick *a)
{
    __u64 pr_id = bpf_get_current_pid_tgid();
    __u32 pr_pid = pr_id >> 32;
    __u32 pr_tid = (__u32)pr_id;
    __u64 pr_ts = bpf_ktime_get_ns();
    char pr_comm[16] = {};
    bpf_get_current_comm(pr_comm, sizeof(pr_comm));
    __u32 pr_zero = 0;
    struct pr_scratch_tick *sc = pr_scratch_tick.lookup(&pr_zero);
    if (!sc)
        return 0;
    do {
        do {
            if (!((((__s64)((__s32)(a->v1))) == 2LL))) break;
            struct pr_rec_0 *ev = pr_events.ringbuf_reserve(sizeof(struct pr_rec_0));
            if (!ev) { pr_count(PR_LOST_RINGBUF); break; }
            pr_fill_hdr(&ev->h, 0, pr_id, pr_ts);
            ev->f0 = (__s64)(((__s32)(a->v1)));
            pr_events.ringbuf_submit(ev, pr_wakeup_flags());
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
    if (pr_skip(0))
        return 0;
    struct pr_args_tick pr_a = {};
    pr_a.v1 = (__s64)(__s32)ctx->di;
    return pr_body_tick(&pr_a);
}
