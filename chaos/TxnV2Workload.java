// The fault harness's transactional workloads run by Apache Kafka's Java client 4.2, which runs transactions V2
// (KIP-890 part 2) against a broker that finalizes transaction.version 2: Produce v12+ adds the partitions, EndTxn v5
// bumps the epoch at every commit and abort, TxnOffsetCommit v5 adds the group's offsets. chaos/txn_v2.py compiles
// and starts it; it prints one JSON object a line (the History's events) and stops when its stdin closes or its time
// is up. The loops are those of chaos/workload.py's librdkafka ones, so the checker judges both the same way.

import java.io.IOException;
import java.io.InputStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class TxnV2Workload {
    private static final String TXN_TOPIC = "txn";
    private static final String QUEUE_TOPIC = "queue";
    private static final String CTP_TOPIC = "ctp";
    private static final String CTP_PREFIX = "x";
    private static final String GROUP = "chaos";

    private final String bootstrap;
    private final int partitions;
    private final long seed;
    private final long deadlineNanos;
    private final AtomicBoolean stopping = new AtomicBoolean();

    private TxnV2Workload(String bootstrap, int partitions, long seed, double seconds) {
        this.bootstrap = bootstrap;
        this.partitions = partitions;
        this.seed = seed;
        this.deadlineNanos = System.nanoTime() + (long) (seconds * 1e9);
    }

    /** Arguments: bootstrap, partitions, seed, seconds to run at most, then the loops to run ("t0", "x0"). */
    public static void main(String[] args) throws Exception {
        TxnV2Workload workload = new TxnV2Workload(args[0], Integer.parseInt(args[1]), Long.parseLong(args[2]),
                                                   Double.parseDouble(args[3]));
        List<Thread> threads = new ArrayList<>();
        for (int i = 4; i < args.length; i++) {
            String name = args[i];
            Runnable loop = name.startsWith("t") ? () -> workload.transact(name) : () -> workload.transform(name);
            Thread thread = new Thread(loop, name);
            thread.start();
            threads.add(thread);
        }
        Thread watcher = new Thread(() -> workload.stopWhenClosed(System.in), "stdin");
        watcher.setDaemon(true);
        watcher.start();
        for (Thread thread : threads) {
            thread.join();
        }
    }

    private void stopWhenClosed(InputStream in) {
        try {
            while (in.read() >= 0) {
                // anything written is ignored: only the end of the stream matters
            }
        } catch (IOException ignored) {
            // a broken pipe is the end too
        }
        stopping.set(true);
    }

    private boolean running() {
        return !stopping.get() && System.nanoTime() < deadlineNanos;
    }

    // -- events -----------------------------------------------------------------------------------------------

    private static synchronized void emit(String type, String process, Map<String, Object> fields) {
        StringBuilder line = new StringBuilder("{\"type\":").append(json(type)).append(",\"process\":")
            .append(json(process));
        for (Map.Entry<String, Object> field : fields.entrySet()) {
            line.append(',').append(json(field.getKey())).append(':').append(json(field.getValue()));
        }
        System.out.println(line.append('}'));
        System.out.flush();
    }

    private static String json(Object value) {
        if (value == null) {
            return "null";
        }
        if (value instanceof Number || value instanceof Boolean) {
            return value.toString();
        }
        if (value instanceof List<?> list) {
            List<String> items = new ArrayList<>();
            for (Object item : list) {
                items.add(json(item));
            }
            return "[" + String.join(",", items) + "]";
        }
        StringBuilder out = new StringBuilder("\"");
        for (char c : value.toString().toCharArray()) {
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20) {
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        return out.append('"').toString();
    }

    private static Map<String, Object> fields(Object... pairs) {
        Map<String, Object> map = new java.util.LinkedHashMap<>();
        for (int i = 0; i < pairs.length; i += 2) {
            map.put((String) pairs[i], pairs[i + 1]);
        }
        return map;
    }

    private static String describe(Throwable error) {
        return error.getClass().getSimpleName() + ": " + error.getMessage();
    }

    // -- producers --------------------------------------------------------------------------------------------

    private KafkaProducer<String, String> producer(String name) {
        Properties config = new Properties();
        config.put("bootstrap.servers", bootstrap);
        config.put("transactional.id", "chaos-" + name);
        config.put("transaction.timeout.ms", "30000");
        config.put("acks", "all");
        config.put("enable.idempotence", "true");
        config.put("linger.ms", "5");
        config.put("request.timeout.ms", "5000");
        config.put("delivery.timeout.ms", "20000");
        config.put("max.block.ms", "15000");
        config.put("reconnect.backoff.max.ms", "1000");
        config.put("key.serializer", StringSerializer.class.getName());
        config.put("value.serializer", StringSerializer.class.getName());
        return new KafkaProducer<>(config);
    }

    /** A producer whose initTransactions succeeded (tried until the time is up), or null. */
    private KafkaProducer<String, String> transactionalProducer(String name) {
        while (running()) {
            KafkaProducer<String, String> producer = producer(name);
            try {
                producer.initTransactions();
                return producer;
            } catch (KafkaException error) {
                emit("txn-init-fail", name, fields("error", describe(error)));
                producer.close(Duration.ofSeconds(5));
            }
        }
        return null;
    }

    /** Commit, or flush and abort; a call that times out is made again (the client allows it), up to 3 times. */
    private static String[] end(KafkaProducer<String, String> producer, boolean commit) {
        KafkaException last = null;
        for (int attempt = 0; attempt < 3; attempt++) {
            try {
                if (commit) {
                    producer.commitTransaction();
                } else {
                    producer.flush();
                    producer.abortTransaction();
                }
                return new String[] {commit ? "commit" : "abort", null};
            } catch (TimeoutException error) {
                last = error;
            } catch (KafkaException error) {
                return endAfter(producer, error);
            }
        }
        return new String[] {"unknown", describe(last)};
    }

    /** After an error the transaction is aborted if the client lets it (what was sent is flushed first): any
     *  failure of that abort (a fatal error, a commit still in doubt) leaves the outcome unknown. */
    private static String[] endAfter(KafkaProducer<String, String> producer, KafkaException error) {
        try {
            producer.flush();
            producer.abortTransaction();
            return new String[] {"abort", describe(error)};
        } catch (KafkaException abortError) {
            return new String[] {"unknown", describe(error) + "; abort: " + describe(abortError)};
        }
    }

    // -- txn: transactions of 1-4 values, 60% committed --------------------------------------------------------

    private void transact(String name) {
        Random rng = new Random(seed);
        KafkaProducer<String, String> producer = transactionalProducer(name);
        int n = 0;
        while (producer != null && running()) {
            List<String> values = new ArrayList<>();
            int count = 1 + rng.nextInt(4);
            for (int i = 0; i < count; i++) {
                values.add(name + "-" + n + "-" + i);
            }
            boolean commit = rng.nextDouble() < 0.6;
            n++;
            String[] outcome;
            try {
                producer.beginTransaction();
                for (int i = 0; i < values.size(); i++) {
                    String value = values.get(i);
                    producer.send(new ProducerRecord<>(TXN_TOPIC, (n + i) % partitions, null, value),
                        (metadata, error) -> {
                            if (error == null) {
                                emit("ack", name, fields("topic", TXN_TOPIC, "value", value, "partition",
                                                         metadata.partition(), "offset", metadata.offset(),
                                                         "txn", true));
                            }
                        });
                }
                outcome = end(producer, commit);
            } catch (KafkaException error) {
                outcome = endAfter(producer, error);
            }
            emit("txn", name, fields("txn", n, "values", values, "outcome", outcome[0], "error", outcome[1]));
            if (outcome[0].equals("unknown")) {
                producer.close(Duration.ofSeconds(5));
                producer = transactionalProducer(name);  // its initTransactions fences the old one's transaction
            }
            sleep(100);
        }
        if (producer != null) {
            producer.close(Duration.ofSeconds(10));
        }
    }

    // -- ctp: consume-transform-produce, the group's offsets in each transaction --------------------------------

    private void transform(String name) {
        Properties config = new Properties();
        config.put("bootstrap.servers", bootstrap);
        config.put("group.id", GROUP + "-ctp");
        config.put("isolation.level", "read_committed");
        config.put("enable.auto.commit", "false");
        config.put("auto.offset.reset", "earliest");
        config.put("session.timeout.ms", "6000");
        config.put("heartbeat.interval.ms", "1000");
        config.put("request.timeout.ms", "5000");
        config.put("default.api.timeout.ms", "10000");
        config.put("reconnect.backoff.max.ms", "1000");
        config.put("metadata.max.age.ms", "2000");
        config.put("max.poll.records", "20");
        config.put("key.deserializer", StringDeserializer.class.getName());
        config.put("value.deserializer", StringDeserializer.class.getName());
        KafkaProducer<String, String> producer = transactionalProducer(name);
        if (producer == null) {
            return;
        }
        int attempt = 0;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(config)) {
            consumer.subscribe(List.of(QUEUE_TOPIC));
            while (running()) {
                ConsumerRecords<String, String> records;
                try {
                    records = consumer.poll(Duration.ofMillis(500));
                } catch (KafkaException error) {
                    emit("consumer-error", name, fields("error", describe(error)));
                    continue;
                }
                if (records.isEmpty()) {
                    continue;
                }
                attempt++;
                List<String> values = new ArrayList<>();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                String[] outcome;
                try {
                    producer.beginTransaction();
                    for (ConsumerRecord<String, String> record : records) {
                        String value = CTP_PREFIX + attempt + ":" + record.value();
                        values.add(value);
                        producer.send(new ProducerRecord<>(CTP_TOPIC, record.partition(), null, value));
                        offsets.put(new TopicPartition(record.topic(), record.partition()),
                                    new OffsetAndMetadata(record.offset() + 1));
                    }
                    producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                    outcome = end(producer, true);
                } catch (KafkaException error) {
                    outcome = endAfter(producer, error);
                }
                emit("txn", name, fields("txn", attempt, "values", values, "outcome", outcome[0],
                                         "error", outcome[1]));
                if (outcome[0].equals("unknown")) {
                    return;  // going on could transform its inputs twice
                }
                if (outcome[0].equals("abort")) {
                    rewind(consumer);
                }
            }
        } finally {
            producer.close(Duration.ofSeconds(10));
        }
    }

    /** Back to the group's committed offsets (the aborted batch is read again). */
    private static void rewind(KafkaConsumer<String, String> consumer) {
        Set<TopicPartition> assignment = consumer.assignment();
        try {
            Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(assignment);
            for (TopicPartition partition : assignment) {
                OffsetAndMetadata offset = committed.get(partition);
                if (offset != null) {
                    consumer.seek(partition, offset.offset());
                } else {
                    consumer.seekToBeginning(List.of(partition));
                }
            }
        } catch (KafkaException ignored) {
            // a rebalance under way: the new assignment starts from the committed offsets anyway
        }
    }

    private static void sleep(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException error) {
            Thread.currentThread().interrupt();
        }
    }
}
