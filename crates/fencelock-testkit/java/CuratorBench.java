// Curator's InterProcessMutex, InterProcessReadWriteLock and InterProcessSemaphoreV2 measured
// the way fencelock's benchmarks measure their own locks, so that both run against the same
// ZooKeeper server in the same run.
//
// Usage: CuratorBench <connect string> solo <seconds> [<primitive>]
//        CuratorBench <connect string> contend <seconds> <workers> <hold-us> [<primitive>]
//   <primitive>: mutex (the default: InterProcessMutex), rw-read or rw-write (the read or
//   write side of an InterProcessReadWriteLock), semaphore <permits> (a lease of an
//   InterProcessSemaphoreV2 of <permits> leases).
//   solo: one thread acquires and releases the primitive in a loop.
//   contend: <workers> threads, one instance of the primitive each on the same path (one
//   Curator client), each holding it <hold-us> (busy wait) per acquisition. For rw-read, the
//   even workers take the write side and the odd ones the read side, and the gaps and waits
//   reported are the readers' (the writers' as w_gap_p50_us, w_gap_p99_us).
//   The gap of an acquisition is the time from the latest release (its sending) to it,
//   counted when that release came after the acquisition was asked (it waited for it); for
//   the mutex, at every acquisition after the first (as before, and as fencelock's bench.rs).
//   "overlaps" counts acquisitions that broke the primitive's rule (a writer beside anyone,
//   more than <permits> leases).
//
// Protocol (stdout lines, flushed): after connecting and a warm-up of the same loop (for the
// JIT), prints "READY" and waits for a line on stdin; then measures for <seconds> and prints
// one line "RESULT key=value ..." and waits for another line on stdin: "again" measures once
// more and prints another RESULT line (interleaving with the caller's own slices), anything
// else closes its session (so that the caller can read the server's counters before the
// close). Errors: "ERROR <text>", exit 1.

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
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.ExponentialBackoffRetry;

public final class CuratorBench {
    static double percentileUs(List<Long> sortedNanos, double p) {
        if (sortedNanos.isEmpty()) {
            return 0;
        }
        int i = (int) Math.round((sortedNanos.size() - 1) * p);
        return sortedNanos.get(i) / 1000.0;
    }

    /** One worker's handle on the primitive: what it takes and gives back. */
    interface Taker {
        Object take() throws Exception;

        void give(Object held) throws Exception;

        /** Whether this handle takes the exclusive side (a writer, a mutex). */
        boolean exclusive();
    }

    static Taker mutex(InterProcessMutex m, boolean exclusive) {
        return new Taker() {
            public Object take() throws Exception {
                m.acquire();
                return m;
            }

            public void give(Object held) throws Exception {
                m.release();
            }

            public boolean exclusive() {
                return exclusive;
            }
        };
    }

    /** Worker {@code w}'s handle on {@code primitive} at {@code path}. */
    static Taker taker(CuratorFramework client, String path, String primitive, int permits, int w) {
        switch (primitive) {
            case "mutex":
                return mutex(new InterProcessMutex(client, path), true);
            case "rw-write":
                return mutex(new InterProcessReadWriteLock(client, path).writeLock(), true);
            case "rw-read": {
                InterProcessReadWriteLock rw = new InterProcessReadWriteLock(client, path);
                boolean writer = w % 2 == 0 && w >= 0;
                return writer ? mutex(rw.writeLock(), true) : mutex(rw.readLock(), false);
            }
            case "semaphore": {
                InterProcessSemaphoreV2 s = new InterProcessSemaphoreV2(client, path, permits);
                return new Taker() {
                    public Object take() throws Exception {
                        return s.acquire();
                    }

                    public void give(Object held) throws Exception {
                        s.returnLease((Lease) held);
                    }

                    public boolean exclusive() {
                        return false;
                    }
                };
            }
            default:
                throw new IllegalArgumentException("unknown primitive " + primitive);
        }
    }

    static long solo(Taker t, long untilNanos) throws Exception {
        long pairs = 0;
        while (System.nanoTime() < untilNanos) {
            t.give(t.take());
            pairs++;
        }
        return pairs;
    }

    /** What the contending workers share. */
    static final class Shared {
        final AtomicLong lastRelease = new AtomicLong(0);
        final AtomicLong inside = new AtomicLong(0);
        final AtomicLong writers = new AtomicLong(0);
        final AtomicLong overlaps = new AtomicLong(0);
        final List<Long> gaps = Collections.synchronizedList(new ArrayList<>());
        final List<Long> writerGaps = Collections.synchronizedList(new ArrayList<>());
        final List<Long> waits = Collections.synchronizedList(new ArrayList<>());
        final int limit;
        final boolean everyGap;

        Shared(int limit, boolean everyGap) {
            this.limit = limit;
            this.everyGap = everyGap;
        }
    }

    /** One acquisition, hold and release by a contending worker. */
    static void turn(Shared sh, Taker t, boolean mixed, long holdNanos) throws Exception {
        long asked = System.nanoTime();
        Object held = t.take();
        long got = System.nanoTime();
        long now = sh.inside.incrementAndGet();
        long w = t.exclusive() ? sh.writers.incrementAndGet() : sh.writers.get();
        if (now > sh.limit || (w > 0 && now > 1)) {
            sh.overlaps.incrementAndGet();
        }
        long r = sh.lastRelease.get();
        boolean writerOfMixed = mixed && t.exclusive();
        if (!writerOfMixed) {
            sh.waits.add(got - asked);
        }
        if (sh.everyGap && r != 0) {
            // The mutex's gaps as before (and as fencelock's bench.rs counts them).
            sh.gaps.add(Math.max(0, got - r));
        } else if (r > asked) {
            (writerOfMixed ? sh.writerGaps : sh.gaps).add(got - r);
        }
        long hold = System.nanoTime() + holdNanos;
        while (System.nanoTime() < hold) {
            Thread.onSpinWait();
        }
        if (t.exclusive()) {
            sh.writers.decrementAndGet();
        }
        sh.inside.decrementAndGet();
        sh.lastRelease.set(System.nanoTime());
        t.give(held);
    }

    /** Contention: returns the result line. */
    static String contend(Taker[] takers, int limit, boolean mixed, boolean everyGap,
            long holdNanos, long untilNanos) throws Exception {
        int workers = takers.length;
        Shared sh = new Shared(limit, everyGap);
        long[] counts = new long[workers];
        Thread[] threads = new Thread[workers];
        Exception[] failed = new Exception[1];
        for (int w = 0; w < workers; w++) {
            final int me = w;
            threads[w] = new Thread(() -> {
                try {
                    while (System.nanoTime() < untilNanos) {
                        turn(sh, takers[me], mixed, holdNanos);
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
        List<Long> g = new ArrayList<>(sh.gaps);
        List<Long> wg = new ArrayList<>(sh.writerGaps);
        List<Long> wt = new ArrayList<>(sh.waits);
        Collections.sort(g);
        Collections.sort(wg);
        Collections.sort(wt);
        long total = 0, min = Long.MAX_VALUE, max = 0;
        for (long c : counts) {
            total += c;
            min = Math.min(min, c);
            max = Math.max(max, c);
        }
        return String.format(java.util.Locale.ROOT,
                "acquisitions=%d gap_p50_us=%.1f gap_p99_us=%.1f gaps=%d wait_p99_us=%.1f"
                        + " w_gap_p50_us=%.1f w_gap_p99_us=%.1f min=%d max=%d overlaps=%d",
                total, percentileUs(g, 0.5), percentileUs(g, 0.99), g.size(),
                percentileUs(wt, 0.99), percentileUs(wg, 0.5), percentileUs(wg, 0.99), min, max,
                sh.overlaps.get());
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
            boolean solo = mode.equals("solo");
            int at = solo ? 3 : 5;
            String primitive = args.length > at ? args[at] : "mutex";
            int permits = primitive.equals("semaphore") ? Integer.parseInt(args[at + 1]) : 1;
            String path = "/curator-bench/" + (solo ? "solo" : "one")
                    + (primitive.equals("mutex") ? "" : "-" + primitive);
            Taker[] takers;
            long holdNanos = 0;
            if (solo) {
                takers = new Taker[] {taker(client, path, primitive, permits, -1)};
            } else {
                takers = new Taker[Integer.parseInt(args[3])];
                holdNanos = Long.parseLong(args[4]) * 1000;
                for (int w = 0; w < takers.length; w++) {
                    takers[w] = taker(client, path, primitive, permits, w);
                }
            }
            boolean mixed = primitive.equals("rw-read");
            boolean everyGap = primitive.equals("mutex");
            int limit = primitive.equals("semaphore") ? permits : Integer.MAX_VALUE;
            if (solo) {
                solo(takers[0], System.nanoTime() + warm);
            } else {
                contend(takers, limit, mixed, everyGap, holdNanos, System.nanoTime() + warm);
            }
            System.out.println("READY");
            System.out.flush();
            in.readLine();
            String again = "again";
            while (again.equals("again")) {
                String line;
                if (solo) {
                    long start = System.nanoTime();
                    long pairs = solo(takers[0], start + (long) (secs * 1e9));
                    double elapsed = (System.nanoTime() - start) / 1e9;
                    line = String.format(java.util.Locale.ROOT, "pairs=%d secs=%.4f", pairs, elapsed);
                } else {
                    line = contend(takers, limit, mixed, everyGap, holdNanos,
                            System.nanoTime() + (long) (secs * 1e9));
                }
                System.out.println("RESULT " + line);
                System.out.flush();
                again = String.valueOf(in.readLine()).trim();
            }
            client.close();
            System.exit(0);
        } catch (Exception e) {
            System.out.println("ERROR " + e);
            System.out.flush();
            System.exit(1);
        }
    }
}
