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

#ifndef PR_FILE_INODE_OFFSET
#error "PR_FILE_INODE_OFFSET is the running kernel's: the loader defines it (-DPR_FILE_INODE_OFFSET=N)"
#endif
#ifndef PR_INODE_INO_OFFSET
#error "PR_INODE_INO_OFFSET is the running kernel's: the loader defines it (-DPR_INODE_INO_OFFSET=N)"
#endif
#ifndef PR_INODE_SB_OFFSET
#error "PR_INODE_SB_OFFSET is the running kernel's: the loader defines it (-DPR_INODE_SB_OFFSET=N)"
#endif
#ifndef PR_MM_EXE_FILE_OFFSET
#error "PR_MM_EXE_FILE_OFFSET is the running kernel's: the loader defines it (-DPR_MM_EXE_FILE_OFFSET=N)"
#endif
#ifndef PR_MM_START_CODE_OFFSET
#error "PR_MM_START_CODE_OFFSET is the running kernel's: the loader defines it (-DPR_MM_START_CODE_OFFSET=N)"
#endif
#ifndef PR_SB_DEV_OFFSET
#error "PR_SB_DEV_OFFSET is the running kernel's: the loader defines it (-DPR_SB_DEV_OFFSET=N)"
#endif
#ifndef PR_TASK_MM_OFFSET
#error "PR_TASK_MM_OFFSET is the running kernel's: the loader defines it (-DPR_TASK_MM_OFFSET=N)"
#endif
/* render/contracts.py: generated */

/* templates/runtime_helpers.h: included verbatim */


#define PR_RINGBUF_PAGES 8192
BPF_RINGBUF_OUTPUT(pr_events, PR_RINGBUF_PAGES);

/* the same pages as the map above (PAGE_SIZE is what bcc's macro counts in) */
#define PR_RINGBUF_BYTES (PR_RINGBUF_PAGES * PAGE_SIZE)
#define PR_WAKEUP_SHARE 16

/* templates/record_helpers.h: included verbatim */
/* CPython frames, read where the event happens (included when a copied user stack keeps
   them: render/pyframes.py). The process is recognised by its executable's (dev, inode)
   in pr_pybins, which planrunner fills before attaching with the offsets of that
   interpreter's version (planrunner/stacks/python_versions.py); the thread's state is
   the GIL holder's when it is this thread, else found in the interpreter's list of
   thread states by native_thread_id; its frames are walked from the current one
   through `previous`, at most the probe's number. A frame in the record names its code
   object; the code's names go once per process into pr_pycode (bounded copies: the
   qualified name's first PR_PY_NAME-1 bytes, the file name's last PR_PY_FILE-1),
   keyed by what the frame holds, so they outlive the process. */
#define PR_PY_NAME 64
#define PR_PY_FILE 64
#define PR_PY_THREADS 64   /* thread states searched for the event's thread */
#define PR_PY_CODES 16384  /* code objects whose names are kept (LRU) */
#define PR_PYF_ENTRY 1     /* pr_pyframe.flags: the first frame of an eval loop */
#define PR_PY_FOUND 1      /* py_flags: the process runs a known CPython */
#define PR_PY_NO_THREAD 2  /* ... but this thread has no thread state (yet) */
#define PR_PY_MORE 4       /* more frames than the probe keeps */
#define PR_PY_FAULT 8      /* a read failed: the frames end there */

struct pr_pyframe {
    __u64 code;        /* the code object */
    __u64 qualname;    /* its co_qualname and co_filename objects: with the code, */
    __u64 filename;    /* the process and the first line, the key in pr_pycode */
    __u64 linetable;   /* its co_linetable (a bytes object), read by planrunner later */
    __s32 lasti;       /* bytes from the first instruction to the one running */
    __s32 firstlineno;
    __u32 flags;
    __u32 pad;
};

struct pr_pycode_key {
    __u32 tgid;
    __s32 firstlineno;
    __u64 code;
    __u64 qualname;
    __u64 filename;
};
struct pr_pycode {
    char name[PR_PY_NAME];  /* co_qualname */
    char file[PR_PY_FILE];  /* co_filename's tail */
};
BPF_TABLE("lru_hash", struct pr_pycode_key, struct pr_pycode, pr_pycode, PR_PY_CODES);

struct pr_pybin {
    __u64 dev;  /* the executable's filesystem (sb->s_dev) and inode */
    __u64 ino;
};

/* Coupled with python_versions.OFFSET_FIELDS (same order). */
struct pr_pyversion {
    __u64 runtime;     /* _PyRuntime, link-time */
    __u64 text_vaddr;  /* the lowest executable segment, link-time: the load bias is
                          mm->start_code - text_vaddr */
    __u16 interp_head, tstate_current, threads_head, ts_next, ts_native_tid, ts_cframe,
          cf_frame, f_code, f_previous, f_prev_instr, f_is_entry, f_owner,
          co_firstlineno, co_filename, co_qualname, co_linetable, co_code,
          str_length, str_state, str_ascii, str_utf8;
};
BPF_HASH(pr_pybins, struct pr_pybin, struct pr_pyversion, 64);

struct pr_pyscratch {
    char frame[128];  /* a _PyInterpreterFrame's head */
    char code[128];   /* a PyCodeObject from co_firstlineno */
    struct pr_pycode_key key;
    struct pr_pycode names;
};
BPF_PERCPU_ARRAY(pr_pyscratch, struct pr_pyscratch, 1);

static __always_inline __u64 pr_py_word(const char *buf, __u32 off)
{
    return *(const __u64 *)(buf + (off & 0x78));
}

static __always_inline __u64 pr_py_ptr(__u64 addr)
{
    __u64 v = 0;
    if (!addr || bpf_probe_read_user(&v, sizeof(v), (void *)addr))
        return 0;
    return v;
}

/* A str object's text into dst: ASCII in place, else its UTF-8 copy when it has one
   ("" otherwise); `tail`: the last size-1 bytes of a longer one. */
static __always_inline void pr_py_str(char *dst, __u32 size, __u64 obj,
                                      const struct pr_pyversion *v, int tail)
{
    struct { __s64 length; __s64 hash; __u32 state; } h = {};
    dst[0] = 0;
    if (!obj || bpf_probe_read_user(&h, sizeof(h), (void *)(obj + v->str_length)))
        return;
    __u64 data = obj + v->str_ascii;
    __s64 len = h.length;
    if (!(h.state & (1 << 6))) {  /* not compact ASCII: its UTF-8 copy, if made */
        struct { __s64 length; __u64 ptr; } u = {};
        if (!(h.state & (1 << 5)) ||
            bpf_probe_read_user(&u, sizeof(u), (void *)(obj + v->str_utf8 - 8)) || !u.ptr)
            return;
        data = u.ptr;
        len = u.length;
    }
    if (tail && len > (__s64)size - 1)
        data += len - (size - 1);
    bpf_probe_read_user_str(dst, size, (void *)data);
}

/* The current thread's Python frames, innermost first, at most `max`: *n of them are
   written to out[], *flags says what was found. */
static __always_inline void pr_py_frames(__u32 *n, __u32 *flags, struct pr_pyframe *out,
                                         const __u32 max)
{
    *n = 0;
    *flags = 0;
    __u64 task = bpf_get_current_task();
    __u64 mm = 0, exe = 0, inode = 0, sb = 0, start = 0;
    __u32 dev = 0;
    struct pr_pybin key = {};
    if (bpf_probe_read_kernel(&mm, 8, (void *)(task + PR_TASK_MM_OFFSET)) || !mm)
        return;
    if (bpf_probe_read_kernel(&exe, 8, (void *)(mm + PR_MM_EXE_FILE_OFFSET)) || !exe)
        return;
    if (bpf_probe_read_kernel(&inode, 8, (void *)(exe + PR_FILE_INODE_OFFSET)) || !inode)
        return;
    bpf_probe_read_kernel(&key.ino, 8, (void *)(inode + PR_INODE_INO_OFFSET));
    if (bpf_probe_read_kernel(&sb, 8, (void *)(inode + PR_INODE_SB_OFFSET)) || !sb)
        return;
    bpf_probe_read_kernel(&dev, 4, (void *)(sb + PR_SB_DEV_OFFSET));
    key.dev = dev;
    struct pr_pyversion *v = pr_pybins.lookup(&key);
    if (!v)
        return;
    *flags = PR_PY_FOUND;
    bpf_probe_read_kernel(&start, 8, (void *)(mm + PR_MM_START_CODE_OFFSET));
    __u64 rt = v->runtime + (start - v->text_vaddr);
    __u64 id = bpf_get_current_pid_tgid();
    __u32 me = (__u32)id, tgid = id >> 32;
    __u64 ts = v->tstate_current ? pr_py_ptr(rt + v->tstate_current) : 0;
    if (!ts || (__u32)pr_py_ptr(ts + v->ts_native_tid) != me) {
        __u64 t = pr_py_ptr(pr_py_ptr(rt + v->interp_head) + v->threads_head);
        ts = 0;
        for (int i = 0; i < PR_PY_THREADS && t; i++) {
            if ((__u32)pr_py_ptr(t + v->ts_native_tid) == me) {
                ts = t;
                break;
            }
            t = pr_py_ptr(t + v->ts_next);
        }
    }
    if (!ts) {
        *flags |= PR_PY_NO_THREAD;
        return;
    }
    __u64 frame = pr_py_ptr(pr_py_ptr(ts + v->ts_cframe) + v->cf_frame);
    __u32 zero = 0;
    struct pr_pyscratch *s = pr_pyscratch.lookup(&zero);
    if (!s)
        return;
    __u32 got = 0;
    for (__u32 i = 0; i < max; i++) {
        if (!frame)
            break;
        if (bpf_probe_read_user(s->frame, 80, (void *)frame)) {
            *flags |= PR_PY_FAULT;
            break;
        }
        __u64 code = pr_py_word(s->frame, v->f_code);
        struct pr_pyframe *f = &out[i];
        f->code = code;
        f->lasti = (__s32)(pr_py_word(s->frame, v->f_prev_instr) - (code + v->co_code));
        f->flags = s->frame[v->f_is_entry & 0x7f] ? PR_PYF_ENTRY : 0;
        f->linetable = 0;
        f->firstlineno = 0;
        f->qualname = 0;
        f->filename = 0;
        __u32 base = v->co_firstlineno & ~7;  /* one read, from an aligned word */
        if (code && bpf_probe_read_user(s->code, 88, (void *)(code + base)) == 0) {
            f->firstlineno = *(__s32 *)(s->code + ((v->co_firstlineno - base) & 7));
            f->linetable = pr_py_word(s->code, v->co_linetable - base);
            f->qualname = pr_py_word(s->code, v->co_qualname - base);
            f->filename = pr_py_word(s->code, v->co_filename - base);
            s->key.tgid = tgid;
            s->key.firstlineno = f->firstlineno;
            s->key.code = code;
            s->key.qualname = f->qualname;
            s->key.filename = f->filename;
            if (!pr_pycode.lookup(&s->key)) {  /* names read once per code object */
                pr_py_str(s->names.name, PR_PY_NAME, f->qualname, v, 0);
                pr_py_str(s->names.file, PR_PY_FILE, f->filename, v, 1);
                pr_pycode.update(&s->key, &s->names);
            }
        }
        got = i + 1;
        frame = pr_py_word(s->frame, v->f_previous);
    }
    if (frame && got == max)
        *flags |= PR_PY_MORE;
    *n = got;
}

struct pr_rec_0 {
    struct pr_hdr h;
    __u32 f0_pid;
    __u32 f0_len;
    __u64 f0_time;
    __u64 f0_regs[4];
    __u32 f0_py_n;
    __u32 f0_py_flags;
    struct pr_pyframe f0_py[32];
    char f0_data[4096];
};
_Static_assert(sizeof(struct pr_rec_0) == 5728, "record layout (render/layout.py)");

BPF_TABLE("lru_hash", __u32, __u8, pr_seen, 16384);

struct pr_ucopies_val {
    __u32 pid;
    __u32 len;
    __u64 time;
    __u64 regs[4];
    __u32 py_n;
    __u32 py_flags;
    struct pr_pyframe py[32];
    char data[4096];
};
BPF_HASH(pr_ucopies, __u64, struct pr_ucopies_val, 2048);

struct pr_ulight_val {
    __u64 tmpl;
    __u32 pid;
    __u32 len;
    __u64 time;
    __u64 regs[4];
    __u32 py_n;
    __u32 py_flags;
    struct pr_pyframe py[32];
};
BPF_HASH(pr_ulight, __u64, struct pr_ulight_val, 2048);
BPF_TABLE("lru_hash", __u64, __u8, pr_uknown, 16384);
/* a Python instruction whose line planrunner knows (runtime/stacks.py) */
struct pr_pyline_key {
    __u32 tgid;
    __s32 lasti;
    __u64 code;
    __u64 linetable;
};
_Static_assert(sizeof(struct pr_pyline_key) == 24, "pr_pyline_key (render/contracts.py)");
_Static_assert(__builtin_offsetof(struct pr_pyline_key, tgid) == 0, "pr_pyline_key.tgid (render/contracts.py)");
_Static_assert(__builtin_offsetof(struct pr_pyline_key, lasti) == 4, "pr_pyline_key.lasti (render/contracts.py)");
_Static_assert(__builtin_offsetof(struct pr_pyline_key, code) == 8, "pr_pyline_key.code (render/contracts.py)");
_Static_assert(__builtin_offsetof(struct pr_pyline_key, linetable) == 16, "pr_pyline_key.linetable (render/contracts.py)");
BPF_TABLE("lru_hash", struct pr_pyline_key, __u32, pr_pyline, 16384);
/* a copy template's key: tgid, copy length, ip (or its page, SPAN_PAGE) and sp */
struct pr_utmpl_key {
    __u32 pid;
    __u32 len;
    __u64 ip;
    __u64 sp;
};
_Static_assert(sizeof(struct pr_utmpl_key) == 24, "pr_utmpl_key (render/contracts.py)");
_Static_assert(__builtin_offsetof(struct pr_utmpl_key, pid) == 0, "pr_utmpl_key.pid (render/contracts.py)");
_Static_assert(__builtin_offsetof(struct pr_utmpl_key, len) == 4, "pr_utmpl_key.len (render/contracts.py)");
_Static_assert(__builtin_offsetof(struct pr_utmpl_key, ip) == 8, "pr_utmpl_key.ip (render/contracts.py)");
_Static_assert(__builtin_offsetof(struct pr_utmpl_key, sp) == 16, "pr_utmpl_key.sp (render/contracts.py)");
/* a copy template: the words (and bp) its walk used, stacks/walk_template.py */
struct pr_utmpl_val {
    __u64 id;
    __u64 cls;
    __u64 bp;
    __u64 lo;
    __u64 hi;
    __u32 bp_used;
    __u32 n;
    __u32 hidden;
    __u64 val[48];
    __u32 off[48];
};
_Static_assert(sizeof(struct pr_utmpl_val) == 632, "pr_utmpl_val (render/contracts.py)");
_Static_assert(__builtin_offsetof(struct pr_utmpl_val, id) == 0, "pr_utmpl_val.id (render/contracts.py)");
_Static_assert(__builtin_offsetof(struct pr_utmpl_val, cls) == 8, "pr_utmpl_val.cls (render/contracts.py)");
_Static_assert(__builtin_offsetof(struct pr_utmpl_val, bp) == 16, "pr_utmpl_val.bp (render/contracts.py)");
_Static_assert(__builtin_offsetof(struct pr_utmpl_val, lo) == 24, "pr_utmpl_val.lo (render/contracts.py)");
_Static_assert(__builtin_offsetof(struct pr_utmpl_val, hi) == 32, "pr_utmpl_val.hi (render/contracts.py)");
_Static_assert(__builtin_offsetof(struct pr_utmpl_val, bp_used) == 40, "pr_utmpl_val.bp_used (render/contracts.py)");
_Static_assert(__builtin_offsetof(struct pr_utmpl_val, n) == 44, "pr_utmpl_val.n (render/contracts.py)");
_Static_assert(__builtin_offsetof(struct pr_utmpl_val, hidden) == 48, "pr_utmpl_val.hidden (render/contracts.py)");
_Static_assert(__builtin_offsetof(struct pr_utmpl_val, val) == 56, "pr_utmpl_val.val (render/contracts.py)");
_Static_assert(__builtin_offsetof(struct pr_utmpl_val, off) == 440, "pr_utmpl_val.off (render/contracts.py)");
BPF_TABLE("lru_hash", struct pr_utmpl_key, struct pr_utmpl_val, pr_utmpl, 4096);
/* The id of the template copy c's native stack is (0: none holds), its
   class in *cls, and whether its pc is hidden by Python frames in *hidden:
   the template of c's pc, or of a span of pcs under c's pc's page. */
static __always_inline __u64 pr_utmpl_match(struct pr_ucopies_val *c, __u64 *cls, __u32 *hidden)
{
    struct pr_utmpl_key k = {c->pid, c->len, c->regs[0], c->regs[1]};
    struct pr_utmpl_val *t = pr_utmpl.lookup(&k);
    if (!t) {
        k.ip = 0x8000000000000000ULL | (c->regs[0] >> 12);
        t = pr_utmpl.lookup(&k);
        if (!t || c->regs[0] < t->lo || c->regs[0] >= t->hi)
            return 0;
    }
    if (t->bp_used && t->bp != c->regs[2])
        return 0;
    __u32 n = t->n;
    for (__u32 i = 0; i < 48; i++) {
        if (i >= n)
            break;
        __u32 o = t->off[i];
        if (o > 4088 || *(__u64 *)(c->data + o) != t->val[i])
            return 0;
    }
    *cls = t->cls;
    *hidden = t->hidden;
    return t->id;
}

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
    struct pr_ulight_val agg1_uc0_l;
};
BPF_PERCPU_ARRAY(pr_scratch_value, struct pr_scratch_value, 1);

/* pr_id: bpf_get_current_pid_tgid(), read once by the thunk */
static __always_inline int pr_body_value(struct pr_args_value *a, __u64 pr_id)
{
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
            if (!ev) { pr_lost_record(); break; }
            pr_fill_hdr(&ev->h, 0, pr_id, pr_ts);
            ev->f0_pid = pr_id >> 32;
            ev->f0_time = bpf_ktime_get_ns();  /* where it falls among maps changes */
            ev->f0_regs[0] = a->u_regs[0];
            ev->f0_regs[1] = a->u_regs[1];
            ev->f0_regs[2] = a->u_regs[2];
            ev->f0_regs[3] = 0;
            pr_py_frames(&ev->f0_py_n, &ev->f0_py_flags, ev->f0_py, 32);
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
            pr_py_frames(&pr_uc0->py_n, &pr_uc0->py_flags, pr_uc0->py, 32);
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
            __u64 pr_h0 = 0;
            __u64 pr_h0_c = 0;
            __u32 pr_h0_x = 0;
            __u64 pr_h0_t = pr_utmpl_match(pr_uc0, &pr_h0_c, &pr_h0_x);
            if (pr_h0_t) {  /* the native stack is a template's: send the rest */
                pr_h0 = (0x9e3779b97f4a7c15ULL ^ (pr_uc0->py_n ? pr_h0_c : pr_h0_t)) * 0x100000001b3ULL;
                if (!(pr_uc0->py_n && pr_h0_x))
                    pr_h0 = (pr_h0 ^ pr_uc0->regs[0]) * 0x100000001b3ULL;
                pr_h0 = (pr_h0 ^ pr_uc0->py_n) * 0x100000001b3ULL;
                for (__u32 pr_j = 0; pr_j < 32; pr_j++) {
                    if (pr_j >= pr_uc0->py_n)
                        break;
                    struct pr_pyline_key pr_lk = {pr_uc0->pid, pr_uc0->py[pr_j].lasti, pr_uc0->py[pr_j].code, pr_uc0->py[pr_j].linetable};
                    __u32 *pr_ln = pr_pyline.lookup(&pr_lk);
                    pr_h0 = (pr_h0 ^ pr_uc0->py[pr_j].code) * 0x100000001b3ULL;
                    pr_h0 = (pr_h0 ^ ((pr_ln ? 0x8000000000000000ULL | *pr_ln : (__u64)(__u32)pr_uc0->py[pr_j].lasti) | ((__u64)pr_uc0->py[pr_j].flags << 32))) * 0x100000001b3ULL;
                }
                if (!pr_h0)
                    pr_h0 = 1;  /* 0 means: no stack */
                if (!pr_uknown.lookup(&pr_h0)) {  /* not named yet */
                    struct pr_ulight_val *pr_uc0_l = &sc->agg1_uc0_l;
                    pr_uc0_l->tmpl = pr_h0_t;
                    bpf_probe_read_kernel(&pr_uc0_l->pid, __builtin_offsetof(struct pr_ucopies_val, data), &pr_uc0->pid);
                    if (!pr_ulight.lookup(&pr_h0) && pr_ulight.update(&pr_h0, pr_uc0_l)) {
                        pr_count(PR_STACK_LOST);
                        pr_h0 = 0;
                    }
                }
            } else {
                pr_h0 = 0xcbf29ce484222325ULL ^ pr_uc0->len;
                pr_h0 = (pr_h0 ^ pr_uc0->regs[0]) * 0x100000001b3ULL;
                pr_h0 = (pr_h0 ^ pr_uc0->regs[1]) * 0x100000001b3ULL;
                pr_h0 = (pr_h0 ^ pr_uc0->regs[2]) * 0x100000001b3ULL;
                __u32 pr_h0_len = *(volatile __u32 *)&pr_uc0->len;
                for (__u32 pr_i = 0; pr_i < 64; pr_i++) {
                    if (pr_i * 64 + 64 > pr_h0_len)
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
                pr_h0 = (pr_h0 ^ pr_uc0->py_n) * 0x100000001b3ULL;
                for (__u32 pr_j = 0; pr_j < 32; pr_j++) {
                    if (pr_j >= pr_uc0->py_n)
                        break;
                    pr_h0 = (pr_h0 ^ pr_uc0->py[pr_j].code) * 0x100000001b3ULL;
                    pr_h0 = (pr_h0 ^ ((__u64)(__u32)pr_uc0->py[pr_j].lasti | ((__u64)pr_uc0->py[pr_j].flags << 32))) * 0x100000001b3ULL;
                }
                if (!pr_h0)
                    pr_h0 = 1;  /* 0 means: no stack */
                if (!pr_ucopies.lookup(&pr_h0) && pr_ucopies.update(&pr_h0, pr_uc0)) {
                    pr_count(PR_STACK_LOST);
                    pr_h0 = 0;
                }
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
    __u64 pr_id = bpf_get_current_pid_tgid();
#if !defined(PR_DISPATCHED)
    if (pr_skip(PR_CFG_SCOPE_UPROBE, pr_id))
        return 0;
#endif
    struct pr_args_value pr_a = {};
    pr_a.u_regs[0] = ctx->ip;
    pr_a.u_regs[1] = ctx->sp;
    pr_a.u_regs[2] = ctx->bp;
    return pr_body_value(&pr_a, pr_id);
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
