/* bench/set_hits.c - the per-hit workload of bench/sets_bench.py (issue 29).
 *
 * Usage: set_hits CALLS. 40 functions hit_00..hit_39 (distinct bodies, noinline); calls
 * hit_00 CALLS times back to back through a volatile pointer and prints
 * ns_per_call=N (CLOCK_MONOTONIC around the loop) and cpu_ns_per_call=N (its user and
 * system time: a uprobe hit is system time; on a shared machine the wall time also
 * holds the time others ran). Traced by a single uprobe on
 * hit_00 or by a set over hit_*, only hit_00 fires: the difference is the set's.
 * Built by bench/sets_bench.py: gcc -O2 -fno-ipa-icf.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#define FN(k) __attribute__((noinline)) long hit_##k(long x) { return x * (1##k + 3) + 1##k; }
#define TEN(d) FN(d##0) FN(d##1) FN(d##2) FN(d##3) FN(d##4) FN(d##5) FN(d##6) FN(d##7) \
    FN(d##8) FN(d##9)
TEN(0) TEN(1) TEN(2) TEN(3)

static long (*volatile hot)(long) = hit_00;

static long cpu_ns(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000L +
           (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000L;
}

static long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    long calls = argc > 1 ? strtol(argv[1], NULL, 10) : 100000;
    long sum = 0;
    long c0 = cpu_ns(), t0 = now_ns();
    for (long i = 0; i < calls; i++)
        sum += hot(i);
    long t1 = now_ns(), c1 = cpu_ns();
    printf("ns_per_call=%.1f cpu_ns_per_call=%.1f sum=%ld\n", (double)(t1 - t0) / calls,
           (double)(c1 - c0) / calls, sum);
    return 0;
}
