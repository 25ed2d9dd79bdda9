/* Shared-library fixture: a probe in a .so (ET_DYN, file offsets from PT_LOAD). */
#include <sys/sdt.h>

long demo_lib_total;

long demo_lib_add(long a, int b)
{
	demo_lib_total += a + b;
	STAP_PROBE3(demolib, add, a, b, demo_lib_total);
	return demo_lib_total;
}
