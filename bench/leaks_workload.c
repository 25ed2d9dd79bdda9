/* bench/leaks_cost.py's workload: waits until the file argv[1] exists (the tracer is
   attached), then runs argv[2] malloc(64) + free pairs back to back and prints the mean
   time of one pair. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <time.h>
int main(int argc, char **argv) {
    const char *go = argv[1]; long iters = atol(argv[2]);
    while (access(go, F_OK) != 0) usleep(10000);
    struct timespec a, b; void *volatile p;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < iters; i++) { p = malloc(64); free(p); }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("ns_per_pair=%.1f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / iters);
    return 0;
}
