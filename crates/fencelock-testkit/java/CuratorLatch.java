// A Curator LeaderLatch driven over stdin/stdout, so that fencelock's tests can check that its
// ZooKeeper elections and Curator's see one leader at a time on one election path.
//
// Usage: CuratorLatch <connect string> <latch path> <participant id> [<session-ms>]
//   session-ms: the session timeout asked of the server (default 2000).
//
// Lines on stdout (flushed one by one):
//   CONNECTED <session id, hex>       the session is established
//   STARTED <latch node path>         the latch's node exists (it may wait to lead)
//   leading <latch node path>         the latch leads (LeaderLatchListener.isLeader)
//   notleading                        the latch no longer leads (LeaderLatchListener.notLeader)
//   closed                            the latch was closed (its node deleted); exits 0
//   STATE <Curator state> <session id, hex>   a connection state change
//   ERROR <text>                      something failed; the program exits 1
// Lines on stdin: "close" (close the latch and exit). End of input is "close" too.
// Curator's own logging goes to stderr.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderLatchListener;
import org.apache.curator.retry.ExponentialBackoffRetry;

public final class CuratorLatch {
    private static final Object OUT = new Object();

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
            System.err.println("usage: CuratorLatch <connect string> <latch path> <id> [<session-ms>]");
            System.exit(2);
        }
        String connect = args[0];
        String path = args[1];
        String id = args[2];
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
        CountDownLatch close = new CountDownLatch(1);

        Thread input = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(
                    new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null) {
                    if (line.trim().equals("close")) {
                        break;
                    }
                }
            } catch (Exception e) {
                // Treated as end of input.
            }
            close.countDown();
        }, "stdin");
        input.setDaemon(true);

        try {
            client.start();
            if (!client.blockUntilConnected(Math.max(sessionMs, 5000) * 2, TimeUnit.MILLISECONDS)) {
                say("ERROR not connected to " + connect);
                System.exit(1);
            }
            say("CONNECTED " + session(client));
            LeaderLatch latch = new LeaderLatch(client, path, id);
            latch.addListener(new LeaderLatchListener() {
                @Override
                public void isLeader() {
                    say("leading " + latch.getOurPath());
                }

                @Override
                public void notLeader() {
                    say("notleading");
                }
            });
            input.start();
            latch.start();
            // The node is made in the background: report it once it exists.
            while (latch.getOurPath() == null && close.getCount() > 0) {
                Thread.sleep(5);
            }
            if (latch.getOurPath() != null) {
                say("STARTED " + latch.getOurPath());
            }
            close.await();
            latch.close();
            say("closed");
            client.close();
            System.exit(0);
        } catch (Exception e) {
            say("ERROR " + e);
            System.exit(1);
        }
    }
}
