// Curator's InterProcessMutex measured the way fencelock's benchmark measures its own locks,
// so that both run against the same ZooKeeper server in the same run.
//
// Usage: CuratorBench <connect string> solo <seconds>
//        CuratorBench <connect string> contend <seconds> <workers> <hold-us>
//   solo: one thread acquires and releases one mutex in a loop.
//   contend: <workers> threads, one InterProcessMutex each on the same path (one Curator
//   client), each holding it <hold-us> (busy wait) per acquisition.
//
// Protocol (stdout lines, flushed): after connecting and a warm-up of the same loop (for the
// JIT), prints "READY" and waits for a line on stdin; then measures for <seconds> and prints
// one line "RESULT key=value ..." and waits for another line on stdin before it closes its
// session (so that the caller can read the server's counters before the close). Errors:
// "ERROR <text>", exit 1.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;

public final class CuratorBench {
    static double percentileUs(List<Long> sortedNanos, double p) {
        if (sortedNanos.isEmpty()) {
            return 0;
        }
        int i = (int) Math.round((sortedNanos.size() - 1) * p);
        return sortedNanos.get(i) / 1000.0;
    }

    static long solo(InterProcessMutex m, long untilNanos) throws Exception {
        long pairs = 0;
        while (System.nanoTime() < untilNanos) {
            m.acquire();
            m.release();
            pairs++;
        }
        return pairs;
    }

    /** Contention: returns the result line. */
    static String contend(CuratorFramework client, String path, int workers, long holdNanos,
            long untilNanos) throws Exception {
        AtomicLong lastRelease = new AtomicLong(0);
        AtomicLong inside = new AtomicLong(0);
        AtomicLong overlaps = new AtomicLong(0);
        List<Long> gaps = Collections.synchronizedList(new ArrayList<>());
        List<Long> waits = Collections.synchronizedList(new ArrayList<>());
        long[] counts = new long[workers];
        Thread[] threads = new Thread[workers];
        Exception[] failed = new Exception[1];
        for (int w = 0; w < workers; w++) {
            final int me = w;
            InterProcessMutex m = new InterProcessMutex(client, path);
            threads[w] = new Thread(() -> {
                try {
                    while (System.nanoTime() < untilNanos) {
                        long asked = System.nanoTime();
                        m.acquire();
                        long got = System.nanoTime();
                        if (inside.getAndIncrement() != 0) {
                            overlaps.incrementAndGet();
                        }
                        waits.add(got - asked);
                        long r = lastRelease.get();
                        if (r != 0) {
                            gaps.add(Math.max(0, got - r));
                        }
                        long hold = System.nanoTime() + holdNanos;
                        while (System.nanoTime() < hold) {
                            Thread.onSpinWait();
                        }
                        inside.decrementAndGet();
                        lastRelease.set(System.nanoTime());
                        m.release();
                        counts[me]++;
                    }
                } catch (Exception e) {
                    synchronized (failed) {
                        failed[0] = e;
                    }
                }
            });
            threads[w].start();
        }
        for (Thread t : threads) {
            t.join();
        }
        if (failed[0] != null) {
            throw failed[0];
        }
        List<Long> g = new ArrayList<>(gaps);
        List<Long> wt = new ArrayList<>(waits);
        Collections.sort(g);
        Collections.sort(wt);
        long total = 0, min = Long.MAX_VALUE, max = 0;
        for (long c : counts) {
            total += c;
            min = Math.min(min, c);
            max = Math.max(max, c);
        }
        return String.format(java.util.Locale.ROOT,
                "acquisitions=%d gap_p50_us=%.1f gap_p99_us=%.1f wait_p99_us=%.1f min=%d max=%d overlaps=%d",
                total, percentileUs(g, 0.5), percentileUs(g, 0.99), percentileUs(wt, 0.99), min, max,
                overlaps.get());
    }

    public static void main(String[] args) throws Exception {
        String connect = args[0];
        String mode = args[1];
        double secs = Double.parseDouble(args[2]);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(connect)
                .sessionTimeoutMs(30000)
                .connectionTimeoutMs(10000)
                .retryPolicy(new ExponentialBackoffRetry(100, 5))
                .ensembleTracker(false)
                .build();
        try {
            client.start();
            client.blockUntilConnected();
            long warm = (long) (Math.max(1.0, secs / 2) * 1e9);
            String line;
            if (mode.equals("solo")) {
                InterProcessMutex m = new InterProcessMutex(client, "/curator-bench/solo");
                solo(m, System.nanoTime() + warm);
                System.out.println("READY");
                System.out.flush();
                in.readLine();
                long start = System.nanoTime();
                long pairs = solo(m, start + (long) (secs * 1e9));
                double elapsed = (System.nanoTime() - start) / 1e9;
                line = String.format(java.util.Locale.ROOT, "pairs=%d secs=%.4f", pairs, elapsed);
            } else {
                int workers = Integer.parseInt(args[3]);
                long holdNanos = Long.parseLong(args[4]) * 1000;
                String path = "/curator-bench/one";
                contend(client, path, workers, holdNanos, System.nanoTime() + warm);
                System.out.println("READY");
                System.out.flush();
                in.readLine();
                line = contend(client, path, workers, holdNanos,
                        System.nanoTime() + (long) (secs * 1e9));
            }
            System.out.println("RESULT " + line);
            System.out.flush();
            in.readLine();
            client.close();
            System.exit(0);
        } catch (Exception e) {
            System.out.println("ERROR " + e);
            System.out.flush();
            System.exit(1);
        }
    }
}
