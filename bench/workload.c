/* bench/workload.c - the USDT target of planrunner's benchmark suite (bench/run.py).
 *
 * Probe: bench:tick(long counter, char *word, int len); word is one of ev-alpha,
 * ev-beta, ev-gamma, ev-delta. Three builds of this one file (bench/run.py makes them):
 *   workload_plain  stock sys/sdt.h: the site is a 1-byte nop (an int3 uprobe when traced)
 *   workload_sem    -DBENCH_SEM: the probe is guarded by the semaphore bench_tick_semaphore
 *   workload_nop5   -DBENCH_NOP5: the site is a 5-byte nop, which Linux >= 6.18 can turn
 *                   into an optimized uprobe (a call into [uprobes-trampoline])
 *
 * Usage: workload [-w SECS] [-s MS] loop SECONDS | rate HZ SECONDS
 *   loop: fire back to back; prints ns_per_iter (wall), user/sys ns per iteration.
 *   rate: fire HZ events/s in bursts of at most 1 ms worth on 1 ms ticks; a producer
 *         slowed by its tracer falls behind and still stops after SECONDS. Prints fired,
 *         achieved_hz and busy_ns_per_fire (time inside bursts / events fired).
 *   -w SECS: first wait (up to SECS) until a tracer is attached, seen from inside: the
 *         site's first byte differs from the file's (int3 or call) and, for the semaphore
 *         build, the semaphore is raised. Then settle -s MS (default 200).
 * Output: one line of key=value pairs on stdout.
 *
 * Also: workload ADDR ITERS KEYS (ADDR in hex, or 0 when untraced), the interface of
 * bench/agg_overhead.py: probe bench:hit(long key), key = i % KEYS, fired ITERS times back
 * to back after the byte at ADDR turned into a breakpoint (then 300 ms to settle);
 * prints attached=0|1 ns_per_iter=...
 */
#define _GNU_SOURCE
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef BENCH_SEM
#define _SDT_HAS_SEMAPHORES 1
volatile unsigned short bench_tick_semaphore __attribute__((section(".probes")));
volatile unsigned short bench_hit_semaphore __attribute__((section(".probes")));
#define VARIANT "sem"
#define GUARD if (__builtin_expect(bench_tick_semaphore, 0))
#else
#define GUARD
#ifdef BENCH_NOP5
#define VARIANT "nop5"
#else
#define VARIANT "plain"
#endif
#endif
#include <sys/sdt.h>
#ifdef BENCH_NOP5
#undef _SDT_NOP
#define _SDT_NOP .byte 0x0f; .byte 0x1f; .byte 0x44; .byte 0x00; .byte 0x00
#endif

static const char *const WORDS[4] = {"ev-alpha", "ev-beta", "ev-gamma", "ev-delta"};
static const int LENS[4] = {8, 7, 8, 8};

__attribute__((noipa)) static void fire(uint64_t first, uint64_t n)
{
    for (uint64_t i = first; i < first + n; i++) {
        GUARD STAP_PROBE3(bench, tick, (long)i, WORDS[i & 3], LENS[i & 3]);
    }
}

__attribute__((noipa)) static void hit(uint64_t iters, uint64_t keys)
{
    for (uint64_t i = 0; i < iters; i++)
        STAP_PROBE1(bench, hit, (long)(i % keys));
}

static uint64_t now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000ull + t.tv_nsec;
}

static void cpu(uint64_t *user, uint64_t *sys)
{
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    *user = r.ru_utime.tv_sec * 1000000000ull + r.ru_utime.tv_usec * 1000ull;
    *sys = r.ru_stime.tv_sec * 1000000000ull + r.ru_stime.tv_usec * 1000ull;
}

/* The site: its address from our own .note.stapsdt, its byte in the file. */
static volatile unsigned char *site;
static unsigned char site_byte;

static int main_object(struct dl_phdr_info *info, size_t size, void *out)
{
    (void)size;
    *(uintptr_t *)out = info->dlpi_addr;
    return 1;
}

static int find_site(void)
{
    int fd = open("/proc/self/exe", O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) return -1;
    const unsigned char *f = mmap(NULL, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f == MAP_FAILED) return -1;
    const Elf64_Ehdr *eh = (const void *)f;
    const Elf64_Shdr *sh = (const void *)(f + eh->e_shoff);
    const char *names = (const char *)f + sh[eh->e_shstrndx].sh_offset;
    uint64_t pc = 0;
    for (int i = 0; i < eh->e_shnum && !pc; i++) {
        if (strcmp(names + sh[i].sh_name, ".note.stapsdt")) continue;
        for (uint64_t off = 0; off + sizeof(Elf64_Nhdr) <= sh[i].sh_size;) {
            const Elf64_Nhdr *nh = (const void *)(f + sh[i].sh_offset + off);
            const unsigned char *desc = (const unsigned char *)(nh + 1) + ((nh->n_namesz + 3) & ~3u);
            const char *prov = (const char *)desc + 24;
            if (nh->n_type == 3 && !strcmp(prov, "bench") && !strcmp(prov + 6, "tick"))
                memcpy(&pc, desc, 8);
            off += sizeof *nh + ((nh->n_namesz + 3) & ~3u) + ((nh->n_descsz + 3) & ~3u);
        }
    }
    for (int i = 0; i < eh->e_shnum && pc; i++)
        if (sh[i].sh_type == SHT_PROGBITS && pc >= sh[i].sh_addr &&
            pc < sh[i].sh_addr + sh[i].sh_size)
            site_byte = f[sh[i].sh_offset + (pc - sh[i].sh_addr)];
    uintptr_t bias = 0;
    dl_iterate_phdr(main_object, &bias);
    site = (volatile unsigned char *)(bias + pc);
    return pc ? 0 : -1;
}

static const char *site_state(void)
{
    return *site == site_byte ? "orig" : *site == 0xcc ? "int3" : *site == 0xe8 ? "call" : "other";
}

static int attached(void)
{
#ifdef BENCH_SEM
    if (!bench_tick_semaphore) return 0;
#endif
    return *site != site_byte;
}

static void sleep_until(uint64_t t)
{
    struct timespec ts = {t / 1000000000ull, t % 1000000000ull};
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
}

static int agg_mode(char **argv)
{
    volatile unsigned char *addr = (volatile unsigned char *)strtoul(argv[1], NULL, 16);
    uint64_t iters = strtoull(argv[2], NULL, 10), keys = strtoull(argv[3], NULL, 10);
    int ok = 0;
    if (addr) {
        uint64_t limit = now() + 30000000000ull;
        while (!(ok = *addr == 0xcc) && now() < limit) usleep(1000);
        usleep(300000);
    }
    uint64_t t0 = now();
    hit(iters, keys ? keys : 1);
    printf("attached=%d ns_per_iter=%.2f\n", ok, (double)(now() - t0) / iters);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && (argv[1][0] == '0'))
        return agg_mode(argv);
    double wait_s = 0;
    long settle_ms = 200;
    int opt;
    while ((opt = getopt(argc, argv, "+w:s:")) != -1) {
        if (opt == 'w') wait_s = atof(optarg);
        else if (opt == 's') settle_ms = atol(optarg);
        else return 2;
    }
    int is_rate = optind < argc && !strcmp(argv[optind], "rate");
    if (optind + 1 + is_rate >= argc || find_site() < 0) {
        fprintf(stderr, "usage: workload [-w SECS] [-s MS] loop SECONDS | rate HZ SECONDS\n");
        return 2;
    }
    double hz = is_rate ? atof(argv[optind + 1]) : 0, secs = atof(argv[optind + 1 + is_rate]);
    int ok = -1;
    if (wait_s > 0) {
        uint64_t limit = now() + (uint64_t)(wait_s * 1e9);
        while (!(ok = attached()) && now() < limit) usleep(1000);
        if (ok) usleep(settle_ms * 1000);
    }
    uint64_t u0, s0, u1, s1, fired = 0, busy = 0, limit = (uint64_t)(secs * 1e9);
    cpu(&u0, &s0);
    uint64_t t0 = now(), el;
    if (!is_rate) {
        do { fire(fired, 1000); fired += 1000; } while ((el = now() - t0) < limit);
        busy = el;
    } else {
        uint64_t burst_max = hz >= 1000 ? (uint64_t)(hz / 1000) : 1;
        while ((el = now() - t0) < limit) {
            uint64_t due = (uint64_t)(el * hz / 1e9) + 1;
            if (due > fired) {
                uint64_t n = due - fired < burst_max ? due - fired : burst_max, t = now();
                fire(fired, n);
                fired += n;
                busy += now() - t;
                if (fired < (now() - t0) * hz / 1e9) continue; /* behind: no sleep */
            }
            uint64_t tick = t0 + ((now() - t0) / 1000000 + 1) * 1000000;
            uint64_t next = t0 + (uint64_t)(fired * 1e9 / hz);
            uint64_t wake = next > tick ? next : tick;
            sleep_until(wake < t0 + limit ? wake : t0 + limit);
        }
    }
    cpu(&u1, &s1);
    printf("mode=%s variant=%s pid=%d fired=%lu elapsed_ns=%lu ns_per_iter=%.2f "
           "busy_ns_per_fire=%.2f achieved_hz=%.0f user_ns_per_iter=%.2f sys_ns_per_iter=%.2f "
           "site_after=%s attach_ok=%d\n",
           is_rate ? "rate" : "loop", VARIANT, getpid(), (unsigned long)fired,
           (unsigned long)el, (double)el / fired, fired ? (double)busy / fired : 0.0,
           fired * 1e9 / el, (double)(u1 - u0) / fired, (double)(s1 - s0) / fired,
           site_state(), ok);
    return 0;
}
