/* planrunner expression helpers, called by the C that planrunner/render/expr_c.py emits.
 *
 * Included verbatim by the program template. Needs __u32/__u64/__s64, __always_inline,
 * bpf_probe_read_user and pr_user_bytes_f (runtime_helpers.h). Every loop is bounded by a size that is
 * a compile-time constant at each call site, so the BPF verifier can follow it.
 *
 * Strings: a buffer of `bufsize` bytes holds a string that ends at its first NUL (or at
 * the end of the buffer). String literals never contain NUL (the checker refuses them).
 * Every predicate returns 0 or 1. `==` and startswith() with a literal are emitted inline,
 * one byte compare each (render/expr_c.py).
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

/* A 64-bit FNV-1a hash of the string in buf (up to its NUL, at most n bytes), never 0:
 * a nested span's `match` compares strings by it, and keeps 0 for a string not read
 * (render/spans.py). */
static __always_inline __u64 pr_str_hash(const char *buf, int n)
{
	__u64 h = 0xcbf29ce484222325ULL;
	int i;

	for (i = 0; i < n; i++) {
		if (buf[i] == 0)
			break;
		h = (h ^ (unsigned char)buf[i]) * 0x100000001b3ULL;
	}
	return h ? h : 1;
}

/* The literal occurs in the string in buf (never past its NUL). lit is a buffer the
 * program filled byte by byte (render/expr_c.py: never a C string literal, which bcc
 * would leave in an unrelocated .rodata). */
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
 * buf, then a NUL after them. The clamp keeps the size provably below bufsize. `fault`:
 * PR_FAULT may fault the page in (runtime_helpers.h), PR_NOFAULT may not. */
static __always_inline void pr_read_user_n(char *buf, int bufsize, const void *src, __s64 n,
					   int fault)
{
	__u32 len = 0;

	if (n > 0)
		len = n < bufsize - 1 ? (__u32)n : (__u32)(bufsize - 1);
	if (len > (__u32)(bufsize - 1))
		len = 0;
	if (fault)
		pr_user_bytes_f(buf, len, src);
	else
		bpf_probe_read_user(buf, len, src);
	buf[len] = 0;
}

#endif /* PLANRUNNER_EXPR_HELPERS_H */
