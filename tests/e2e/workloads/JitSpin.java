// Workload of the JIT e2e test: hot() and cold() share the CPU 3:1, measured by the
// workload itself (the thread's CPU time around each call). Usage: java JitSpin WARM_S
// RUN_S: it spins WARM_S seconds (the JIT compiles both), prints "ready PID", spins
// RUN_S seconds more and prints "hot_ns N cold_ns N pid N" for those RUN_S seconds only.
// The calls come in rounds: hot for 3d of CPU time, then cold for d, d pseudo-random
// from 10 to 50 ms, so that the samples (99 Hz) cannot lock onto a short fixed cycle's
// phase (js_spin.js says how node's did).
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;

public class JitSpin {
    static final ThreadMXBean CPU = ManagementFactory.getThreadMXBean();
    static long sink;

    static long work(int n) {
        long x = 0;
        for (int i = 0; i < n; i++) {
            x = (x * 1103515245L + 12345L + i) % 2147483647L;
        }
        return x;
    }

    static long hot(int n) {
        return work(n) + 1;
    }

    static long cold(int n) {
        return work(n) + 2;
    }

    static long[] spin(double seconds) {
        java.util.Random rounds = new java.util.Random(0x9e3779b9L);  // the same each run
        long hotNs = 0, coldNs = 0;
        long begin = CPU.getCurrentThreadCpuTime();
        while (CPU.getCurrentThreadCpuTime() - begin < (long) (seconds * 1e9)) {
            long d = (long) ((10 + 40 * rounds.nextDouble()) * 1e6);
            long hotEnd = hotNs + 3 * d, coldEnd = coldNs + d;
            while (hotNs < hotEnd) {
                long t0 = CPU.getCurrentThreadCpuTime();
                sink += hot(20000);
                hotNs += CPU.getCurrentThreadCpuTime() - t0;
            }
            while (coldNs < coldEnd) {
                long t1 = CPU.getCurrentThreadCpuTime();
                sink += cold(20000);
                coldNs += CPU.getCurrentThreadCpuTime() - t1;
            }
        }
        return new long[] {hotNs, coldNs};
    }

    public static void main(String[] args) {
        spin(Double.parseDouble(args[0]));
        long pid = ProcessHandle.current().pid();
        System.out.println("ready " + pid);
        System.out.flush();
        long[] ns = spin(Double.parseDouble(args[1]));
        System.out.println("hot_ns " + ns[0] + " cold_ns " + ns[1] + " pid " + pid
                           + " sink " + (sink % 10));
    }
}
