// Workload of the java-latency, java-flow and java-objnew plan tests, with known calls,
// depths and allocations. Run with -XX:+ExtendedDTraceProbes (method and allocation
// probes fire only with it). Usage: java JvmCalls calls|latency|flow|objnew
//   calls    fib(15): 1973 calls of JvmCalls.fib
//   latency  nap(4): 5 nested calls, each sleeping NAP_MS then recursing; prints
//            "nap DEPTH INNER OUTER" per call: ns inside it, and from before its call
//            to after its return
//   flow     top -> middle x2 -> leaf x2 each
//   objnew   1000 JvmCalls$Widget (one int field: 16 bytes), 300 int[10] (56 bytes)
import java.util.ArrayList;
import java.util.List;

public class JvmCalls {
    static final int NAP_MS = 10;
    static final List<long[]> NAPS = new ArrayList<>();
    static final long[] OUTER = new long[5];  // depth -> ns from before the call to after

    static final class Widget {
        int i;

        Widget(int i) {
            this.i = i;
        }
    }

    static int fib(int n) {
        return n < 2 ? n : fib(n - 1) + fib(n - 2);
    }

    static void nap(int n) throws InterruptedException {
        long t0 = System.nanoTime();
        Thread.sleep(NAP_MS);
        if (n > 0) {  // the inner call timed from here too: before it to after its return
            long t1 = System.nanoTime();
            nap(n - 1);
            OUTER[4 - (n - 1)] = System.nanoTime() - t1;
        }
        NAPS.add(new long[] {4 - n, System.nanoTime() - t0});
    }

    static int leaf(int x) {
        return x + 1;
    }

    static int middle(int x) {
        return leaf(x) + leaf(x);
    }

    static int top() {
        return middle(1) + middle(2);
    }

    public static void main(String[] args) throws Exception {
        switch (args[0]) {
            case "calls":
                fib(15);
                break;
            case "latency":
                long t0 = System.nanoTime();
                nap(4);
                OUTER[0] = System.nanoTime() - t0;
                for (long[] n : NAPS) {
                    System.out.println("nap " + n[0] + " " + n[1] + " " + OUTER[(int) n[0]]);
                }
                break;
            case "flow":
                top();
                break;
            case "objnew":
                Object[] kept = new Object[1300];
                for (int i = 0; i < 1000; i++) {
                    kept[i] = new Widget(i);
                }
                for (int i = 0; i < 300; i++) {
                    kept[1000 + i] = new int[10];
                }
                System.out.println("kept " + kept.length);
                break;
            default:
                throw new IllegalArgumentException(args[0]);
        }
    }
}
