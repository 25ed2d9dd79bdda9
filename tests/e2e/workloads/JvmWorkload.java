// Workload of the java-* plan tests: known System.gc() calls, named threads and
// classes. Usage: java JvmWorkload GCS THREADS [SLEEP_MS] (then it stays alive that long)
public class JvmWorkload {
    /** Loaded only when first used, after the tracer is attached. */
    static final class PlanrunnerMarker {
        static int touch(int i) {
            return i * 2;
        }
    }

    public static void main(String[] args) throws Exception {
        int gcs = Integer.parseInt(args[0]);
        int threads = Integer.parseInt(args[1]);
        for (int i = 0; i < gcs; i++) {
            System.gc();
        }
        Thread[] started = new Thread[threads];
        for (int i = 0; i < threads; i++) {
            final int n = i + 1;
            started[i] = new Thread(() -> PlanrunnerMarker.touch(n), "planrunner-worker-" + n);
            started[i].start();
        }
        for (Thread t : started) {
            t.join();
        }
        if (args.length > 2) {
            Thread.sleep(Long.parseLong(args[2]));
        }
    }
}
