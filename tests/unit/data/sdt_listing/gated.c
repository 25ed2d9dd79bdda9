/* Compiled with -D_SDT_HAS_SEMAPHORES=1: every probe here needs a semaphore in .probes. */
#include <sys/sdt.h>

unsigned short demo_gated_semaphore __attribute__((section(".probes")));

void demo_gated(int value)
{
	if (demo_gated_semaphore)
		STAP_PROBE1(demo, gated, value);
}
