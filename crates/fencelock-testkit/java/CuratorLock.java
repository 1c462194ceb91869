// A Curator InterProcessMutex driven over stdin/stdout, so that fencelock's tests can check
// that its ZooKeeper backend and Curator exclude each other on one lock path.
//
// Usage: CuratorLock <connect string> <lock path> <hold-ms> [<session-ms> [<kind>]]
//   hold-ms > 0: release after holding that long (or earlier, when told);
//   hold-ms = 0: hold until a line "release" arrives on stdin or stdin closes.
//   session-ms: the session timeout asked of the server (default 2000).
//   kind: what is taken on the path: "mutex" (InterProcessMutex, the default), "read" or
//   "write" (InterProcessReadWriteLock's sides), "semaphore:N" (one lease of an
//   InterProcessSemaphoreV2 of N).
//
// Lines on stdout (flushed one by one):
//   CONNECTED <session id, hex>       the session is established
//   ACQUIRED <lock node path>         the mutex is held; the node is ours
//   RELEASED                          the mutex was released; the program exits 0
//   STATE <Curator state> <session id, hex>   a connection state change
//   CANCELLED                         stdin closed before the mutex was acquired; exits 0
//   ERROR <text>                      something failed; the program exits 1
// Lines on stdin: "release" (release now, or as soon as acquired). End of input is "release",
// or, before the mutex is acquired, "give up".
// Curator's own logging goes to stderr.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.ExponentialBackoffRetry;

public final class CuratorLock {
    /** Makes the node of the current holding visible (Curator keeps it protected). */
    static final class Mutex extends InterProcessMutex {
        Mutex(CuratorFramework client, String path) {
            super(client, path);
        }

        String node() {
            return getLockPath();
        }
    }

    /** What the program takes: acquire, the node that shows it, release. */
    interface Taken {
        void acquire() throws Exception;

        String node();

        void release() throws Exception;
    }

    static Taken taken(CuratorFramework client, String path, String kind) {
        if (kind.equals("read") || kind.equals("write")) {
            InterProcessReadWriteLock rw = new InterProcessReadWriteLock(client, path);
            InterProcessReadWriteLock.ReadLock read = rw.readLock();
            InterProcessReadWriteLock.WriteLock write = rw.writeLock();
            boolean reads = kind.equals("read");
            return new Taken() {
                public void acquire() throws Exception {
                    if (reads) { read.acquire(); } else { write.acquire(); }
                }

                // Curator 5.4 keeps the side's own node protected: its side's nodes, then.
                public String node() {
                    try {
                        return String.join(",", reads ? read.getParticipantNodes() : write.getParticipantNodes());
                    } catch (Exception e) {
                        return "?";
                    }
                }

                public void release() throws Exception {
                    if (reads) { read.release(); } else { write.release(); }
                }
            };
        }
        if (kind.startsWith("semaphore:")) {
            int n = Integer.parseInt(kind.substring("semaphore:".length()));
            InterProcessSemaphoreV2 semaphore = new InterProcessSemaphoreV2(client, path, n);
            Lease[] lease = new Lease[1];
            return new Taken() {
                public void acquire() throws Exception {
                    lease[0] = semaphore.acquire();
                }

                public String node() {
                    return path + "/leases/" + lease[0].getNodeName();
                }

                public void release() throws Exception {
                    semaphore.returnLease(lease[0]);
                }
            };
        }
        Mutex mutex = new Mutex(client, path);
        return new Taken() {
            public void acquire() throws Exception {
                mutex.acquire();
            }

            public String node() {
                return mutex.node();
            }

            public void release() throws Exception {
                mutex.release();
            }
        };
    }

    private static final Object OUT = new Object();
    private static boolean acquired;
    private static boolean finished;

    static void say(String line) {
        synchronized (OUT) {
            System.out.println(line);
            System.out.flush();
        }
    }

    static String session(CuratorFramework client) {
        try {
            return "0x" + Long.toHexString(client.getZookeeperClient().getZooKeeper().getSessionId());
        } catch (Exception e) {
            return "0x0";
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 3 || args.length > 5) {
            System.err.println("usage: CuratorLock <connect string> <lock path> <hold-ms> [<session-ms> [<kind>]]");
            System.exit(2);
        }
        String connect = args[0];
        String path = args[1];
        long holdMs = Long.parseLong(args[2]);
        int sessionMs = args.length > 3 ? Integer.parseInt(args[3]) : 2000;
        String kind = args.length > 4 ? args[4] : "mutex";

        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(connect)
                .sessionTimeoutMs(sessionMs)
                .connectionTimeoutMs(Math.max(sessionMs, 5000))
                .retryPolicy(new ExponentialBackoffRetry(100, 5))
                // Keep the connect string given: the test servers' configs name no client ports.
                .ensembleTracker(false)
                .build();
        client.getConnectionStateListenable().addListener(
                (c, state) -> say("STATE " + state + " " + session(c)));
        CountDownLatch release = new CountDownLatch(1);

        Thread input = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(
                    new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null) {
                    if (line.trim().equals("release")) {
                        release.countDown();
                    }
                }
            } catch (Exception e) {
                // Treated as end of input.
            }
            release.countDown();
            synchronized (OUT) {
                if (!acquired && !finished) {
                    finished = true;
                    System.out.println("CANCELLED");
                    System.out.flush();
                    client.close();
                    Runtime.getRuntime().halt(0);
                }
            }
        }, "stdin");
        input.setDaemon(true);

        try {
            client.start();
            if (!client.blockUntilConnected(Math.max(sessionMs, 5000) * 2, TimeUnit.MILLISECONDS)) {
                say("ERROR not connected to " + connect);
                System.exit(1);
            }
            say("CONNECTED " + session(client));
            input.start();
            Taken mutex = taken(client, path, kind);
            mutex.acquire();
            synchronized (OUT) {
                if (finished) {
                    return;
                }
                acquired = true;
                System.out.println("ACQUIRED " + mutex.node());
                System.out.flush();
            }
            if (holdMs > 0) {
                release.await(holdMs, TimeUnit.MILLISECONDS);
            } else {
                release.await();
            }
            mutex.release();
            synchronized (OUT) {
                finished = true;
                System.out.println("RELEASED");
                System.out.flush();
            }
            client.close();
            System.exit(0);
        } catch (Exception e) {
            say("ERROR " + e);
            System.exit(1);
        }
    }
}
