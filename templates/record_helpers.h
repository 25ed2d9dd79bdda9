/* The record path every plan program shares (included verbatim by program.bpf.c.j2,
   after the ring buffer map, PR_RINGBUF_BYTES and PR_WAKEUP_SHARE, and after
   runtime_helpers.h's pr_config): loss counters, batched wakeups and the
   record header (struct pr_hdr, generated from render/contracts.py PR_HDR). */
/* Per-CPU counters (render/contracts.py Counter: PR_LOST_RINGBUF, PR_LOST_MAPFULL,
   PR_SUBMITS...), then two slots more, not counters: PR_WAKE_AT, this CPU's wakeup
   threshold in bytes, 0 until its first record; PR_RING_FULL, 1 when this CPU's last
   print record found the ring full, 0 when it went in (pr_ring_full). */
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

static __always_inline void pr_note_ring_full(__u64 full)
{
    __u32 which = PR_RING_FULL;
    __u64 *at = pr_counters.lookup(&which);
    if (at)
        *at = full;
}

/* A print record the full ring refused: counted, and noted for pr_ring_full. */
static __always_inline void pr_lost_record(void)
{
    pr_count(PR_LOST_RINGBUF);
    pr_note_ring_full(1);
}

/* 1, with the record counted lost, when the ring cannot take a record of `size` bytes
   now: the thunk of a probe whose one effect is that record (render/program.py
   ring_check_size) asks before its operand reads and clock, which a lost event would
   pay for nothing (back to back ~60% of the events find the ring full; their reads and
   clock cost ~250 ns on an AMD EPYC guest: BENCHMARKS.md issue 28 item 1). The ring is
   asked only while this CPU's last record was lost (PR_RING_FULL): an event that finds
   room pays one per-CPU load, not the query (~11 ns of helper call, and the ring's
   cold position lines at a paced rate). bpf_ringbuf_reserve fails when the producer
   would get more than the ring's size - 1 ahead of the consumer, counting the record
   rounded up to 8 with the kernel's 8-byte header. The consumer may free room between
   this and the reserve: that event is lost as one a moment earlier would have been; a
   reserve that fails later is counted where it fails, as before. bcc hands a map to a
   helper only through the map's member calls: ringbuf_output is rewritten to
   bpf_ringbuf_output(<the map>, ...), which the macro turns into bpf_ringbuf_query on
   the same map (bcc compiles the rewritten text again, this #define included). */
static __always_inline int pr_ring_full(__u64 size)
{
    __u32 which = PR_RING_FULL;
    __u64 *full = pr_counters.lookup(&which);
    if (!full || !*full)
        return 0;
    char pr_unused = 0;
#define bpf_ringbuf_output(map, data, n, flags) bpf_ringbuf_query(map, flags)
    __u64 unread = pr_events.ringbuf_output(&pr_unused, 1, BPF_RB_AVAIL_DATA);
#undef bpf_ringbuf_output
    if (unread + ((size + 8 + 7) & ~7ULL) < PR_RINGBUF_BYTES)
        return 0;  /* room: the reserve will say whether it went in */
    pr_count(PR_LOST_RINGBUF);
    return 1;
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

/* The flags of a print record's submit; the record went in, which PR_RING_FULL notes. */
static __always_inline __u64 pr_wakeup_flags(__u64 size)
{
    pr_note_ring_full(0);
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
