/* planrunner listing fixture: one probe inlined at three places, a probe without
 * arguments, a semaphore-gated probe (gated.c) and a call into libsdtdemo.so (lib.c). */
#include <sys/sdt.h>

long demo_counter;
void demo_gated(int value);

static inline __attribute__((always_inline)) void hit(int i)
{
	DTRACE_PROBE2(demo, multi, i, demo_counter);
}

int main(int argc, char **argv)
{
	(void)argv;
	hit(argc);
	demo_counter++;
	hit(argc * 2);
	demo_counter += argc;
	hit(argc * 3);
	STAP_PROBE(demo, noargs);
	demo_gated(argc);
	return (int)(demo_counter & 1);
}
