import java.io.PrintWriter;
import java.io.StringWriter;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * Runs the named scenarios against one broker in one JVM (a JVM start costs about half a second per scenario otherwise).
 * Usage: Scenarios BOOTSTRAP NAME... ; prints "@@@ NAME PASS|FAIL MILLIS" per scenario, followed on failure by the
 * mismatch or stack trace, and exits 1 if any failed.
 */
public final class Scenarios {
    interface Scenario {
        void run() throws Exception;
    }

    private static final long SCENARIO_TIMEOUT_S = 60;

    private static Map<String, Scenario> all() {
        Map<String, Scenario> scenarios = new LinkedHashMap<>();
        for (String codec : new String[] {"none", "gzip", "snappy", "lz4", "zstd"}) {
            scenarios.put("produce_" + codec, () -> ClientScenarios.produce(codec));
        }
        scenarios.put("produce_log_append_time", ClientScenarios::logAppendTime);
        scenarios.put("consumer_group_rebalance", ClientScenarios::groupRebalance);
        scenarios.put("transactions_read_committed", ClientScenarios::transactions);
        scenarios.put("transactions_fencing", ClientScenarios::fencing);
        scenarios.put("admin_topics", AdminScenarios::topics);
        scenarios.put("admin_configs", AdminScenarios::configs);
        scenarios.put("admin_cluster", AdminScenarios::cluster);
        scenarios.put("admin_list_offsets", AdminScenarios::listOffsets);
        scenarios.put("admin_consumer_groups", AdminScenarios::consumerGroups);
        scenarios.put("admin_producers_transactions", AdminScenarios::producersAndTransactions);
        scenarios.put("admin_elect_leaders", AdminScenarios::electLeaders);
        scenarios.put("admin_reassignments", AdminScenarios::reassignments);
        scenarios.put("admin_fence_producers", AdminScenarios::fenceProducers);
        scenarios.put("admin_remove_members", AdminScenarios::removeMembers);
        scenarios.put("admin_delete_records", AdminScenarios::deleteRecords);
        scenarios.put("admin_log_dirs", AdminScenarios::logDirs);
        VersionScenarios.register(scenarios);  // v39/ or v42/: what only that client's API has
        return scenarios;
    }

    public static void main(String[] args) throws Exception {
        Support.bootstrap = args[0];
        Map<String, Scenario> scenarios = all();
        ExecutorService executor = Executors.newCachedThreadPool(runnable -> {
            Thread thread = new Thread(runnable);
            thread.setDaemon(true);
            return thread;
        });
        boolean failed = false;
        for (int i = 1; i < args.length; i++) {
            String name = args[i];
            Scenario scenario = scenarios.get(name);
            long start = System.nanoTime();
            String failure = null;
            if (scenario == null) {
                failure = "no such scenario: " + name;
            } else {
                Future<?> future = executor.submit(() -> {
                    scenario.run();
                    return null;
                });
                try {
                    future.get(SCENARIO_TIMEOUT_S, TimeUnit.SECONDS);
                } catch (TimeoutException e) {
                    future.cancel(true);
                    failure = "scenario did not finish within " + SCENARIO_TIMEOUT_S + " s";
                } catch (java.util.concurrent.ExecutionException e) {
                    failure = trace(e.getCause());
                }
            }
            long millis = (System.nanoTime() - start) / 1_000_000;
            System.out.println("@@@ " + name + (failure == null ? " PASS " : " FAIL ") + millis);
            if (failure != null) {
                System.out.println(failure);
                failed = true;
            }
            System.out.flush();
        }
        System.exit(failed ? 1 : 0);
    }

    private static String trace(Throwable error) {
        StringWriter out = new StringWriter();
        error.printStackTrace(new PrintWriter(out));
        return out.toString();
    }
}
