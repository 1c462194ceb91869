// A Curator InterProcessMutex driven over stdin/stdout, so that fencelock's tests can check
// that its ZooKeeper backend and Curator exclude each other on one lock path.
//
// Usage: CuratorLock <connect string> <lock path> <hold-ms> [<session-ms>]
//   hold-ms > 0: release after holding that long (or earlier, when told);
//   hold-ms = 0: hold until a line "release" arrives on stdin or stdin closes.
//   session-ms: the session timeout asked of the server (default 2000).
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
        if (args.length < 3 || args.length > 4) {
            System.err.println("usage: CuratorLock <connect string> <lock path> <hold-ms> [<session-ms>]");
            System.exit(2);
        }
        String connect = args[0];
        String path = args[1];
        long holdMs = Long.parseLong(args[2]);
        int sessionMs = args.length > 3 ? Integer.parseInt(args[3]) : 2000;

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
            Mutex mutex = new Mutex(client, path);
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
