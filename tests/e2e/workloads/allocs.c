/* Workload of the c-allocs plan test: known heap allocations, and no stdio (whose
 * buffers would be allocations too): malloc(1000) x100, calloc(10, 24) x50,
 * realloc(p, 4096) x20 of blocks it got from malloc(16). */
#include <stdlib.h>

int main(void)
{
    static void *kept[170];
    int n = 0;
    for (int i = 0; i < 100; i++)
        kept[n++] = malloc(1000);
    for (int i = 0; i < 50; i++)
        kept[n++] = calloc(10, 24);
    for (int i = 0; i < 20; i++)
        kept[n++] = realloc(malloc(16), 4096);
    for (int i = 0; i < n; i++)
        free(kept[i]);
    return 0;
}
