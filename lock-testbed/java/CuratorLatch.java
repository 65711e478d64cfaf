// A participant of Apache Curator's LeaderLatch or LeaderSelector, driven
// line by line on stdin for lock-testbed (CuratorLatch in src/curator.rs):
//   args: CONNECT_STRING SESSION_TIMEOUT_MS
//   prints: "connected" once its client is connected
//   reads:  "start PATH ID"  -> starts a LeaderLatch, prints "started", then
//                               "leader" / "not-leader" as its leadership changes
//           "select PATH ID" -> starts a LeaderSelector (no requeue), prints
//                               "started", then "leader" when it takes the
//                               leadership and "not-leader" when it gives it up
//           "resign"  -> a LeaderSelector leader returns from takeLeadership
//                        (its mutex node is deleted)
//           "leader?" -> prints "leader-is <id of the leader>"
//           "close"   -> closes the latch or selector, prints "closed"
//           "quit" or end of input -> closes the client and exits
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.concurrent.Semaphore;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderLatchListener;
import org.apache.curator.framework.recipes.leader.LeaderSelector;
import org.apache.curator.framework.recipes.leader.LeaderSelectorListenerAdapter;
import org.apache.curator.retry.RetryNTimes;

public class CuratorLatch {
    static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(args[0])
                .sessionTimeoutMs(Integer.parseInt(args[1]))
                .connectionTimeoutMs(10000)
                .retryPolicy(new RetryNTimes(10, 200))
                .build();
        client.start();
        client.blockUntilConnected();
        say("connected");
        LeaderLatch latch = null;
        LeaderSelector selector = null;
        final Semaphore resign = new Semaphore(0);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.startsWith("start ")) {
                String[] parts = line.split(" ", 3);
                latch = new LeaderLatch(client, parts[1], parts[2]);
                latch.addListener(new LeaderLatchListener() {
                    public void isLeader() { say("leader"); }
                    public void notLeader() { say("not-leader"); }
                });
                latch.start();
                say("started");
            } else if (line.startsWith("select ")) {
                String[] parts = line.split(" ", 3);
                selector = new LeaderSelector(client, parts[1], new LeaderSelectorListenerAdapter() {
                    public void takeLeadership(CuratorFramework c) throws Exception {
                        say("leader");
                        try {
                            resign.acquire();
                        } finally {
                            say("not-leader");
                        }
                    }
                });
                selector.setId(parts[2]);
                selector.start();
                say("started");
            } else if (line.equals("resign")) {
                resign.release();
            } else if (line.equals("leader?")) {
                String id = latch != null ? latch.getLeader().getId() : selector.getLeader().getId();
                say("leader-is " + id);
            } else if (line.equals("close")) {
                if (latch != null) {
                    latch.close();
                }
                if (selector != null) {
                    selector.close();
                }
                say("closed");
            } else if (line.equals("quit")) {
                break;
            }
        }
        client.close();
    }
}
