/* The record path every plan program shares (included verbatim by program.bpf.c.j2,
   after the ring buffer map, PR_RINGBUF_BYTES and PR_WAKEUP_SHARE, and after
   runtime_helpers.h's pr_config): loss counters, batched wakeups and the
   record header (struct pr_hdr, generated from render/contracts.py PR_HDR). */
/* Per-CPU counters (render/contracts.py Counter: PR_LOST_RINGBUF, PR_LOST_MAPFULL,
   PR_SUBMITS...), then one slot more, PR_WAKE_AT, not a counter: this CPU's wakeup
   threshold in bytes, 0 until its first record. */
BPF_PERCPU_ARRAY(pr_counters, __u64, PR_COUNTER_SLOTS);

static __always_inline void pr_count_n(__u32 which, __u64 by)
{
    __u64 *n = pr_counters.lookup(&which);
    if (n)
        *n += by;
}

static __always_inline void pr_count(__u32 which)
{
    pr_count_n(which, 1);
}

/* Wake the consumer when this CPU has submitted its share of the ring since its last
   wakeup (render/program.py says why); it also drains on a short timer, so nothing waits
   long. One wakeup per record costs ~10x the uprobe. The share is 1/PR_WAKEUP_SHARE of
   the ring, or 1/(2 * CPUs) on a host with more than PR_WAKEUP_SHARE / 2 CPUs: what all
   CPUs hold back without a wakeup stays under half the ring. The CPU count is the
   runtime's (pr_config), so the C is the same on every host. The threshold is worked
   out on each CPU's first record and kept beside its byte count (PR_WAKE_AT): later
   records touch no config line and divide nothing. */
static __always_inline __u64 pr_wake_at(void)
{
    __u32 key = PR_CFG_NR_CPUS;
    __u32 *cpus = pr_config.lookup(&key);
    __u64 share = PR_WAKEUP_SHARE;
    if (cpus && *cpus > PR_WAKEUP_SHARE / 2)
        share = 2 * (__u64)*cpus;
    return PR_RINGBUF_BYTES / share;
}

static __always_inline __u64 pr_wakeup_flags(__u64 size)
{
    __u32 which = PR_SUBMITS;
    __u64 *n = pr_counters.lookup(&which);
    which = PR_WAKE_AT;
    __u64 *at = pr_counters.lookup(&which);
    if (!n || !at)
        return 0;
    if (!*at)
        *at = pr_wake_at();
    *n += size;
    if (*n < *at)
        return BPF_RB_NO_WAKEUP;
    *n = 0;
    return BPF_RB_FORCE_WAKEUP;
}

static __always_inline void pr_fill_hdr(struct pr_hdr *h, __u32 output, __u64 id, __u64 ts)
{
    h->ts = ts;
    h->output = output;
    h->pid = id >> 32;
    h->tid = (__u32)id;
    h->spare = 0;
    pr_current_comm(h->comm);
}
