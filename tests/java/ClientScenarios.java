import static java.nio.charset.StandardCharsets.UTF_8;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.record.TimestampType;

/** The producer, consumer-group and transaction paths of the Java client. */
final class ClientScenarios {
    private ClientScenarios() {
    }

    private static String value(int i) {
        return i % 37 == 0 ? null : "value-" + i + "-" + "abcdefgh".repeat(10 + i % 20);
    }

    /** The idempotent producer (Java defaults) with one codec, several batches per partition, read back exactly. */
    static void produce(String codec) throws Exception {
        String topic = "java-produce-" + codec;
        int count = 400;
        long base = System.currentTimeMillis() - 60_000;
        try (Admin admin = Support.admin()) {
            Support.createTopic(admin, topic, 2);
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            try (KafkaProducer<String, String> producer = Support.producer(Map.of(
                    ProducerConfig.COMPRESSION_TYPE_CONFIG, codec, ProducerConfig.LINGER_MS_CONFIG, 5,
                    ProducerConfig.BATCH_SIZE_CONFIG, 8192))) {
                for (int i = 0; i < count; i++) {
                    RecordHeaders headers = new RecordHeaders();
                    headers.add("index", Integer.toString(i).getBytes(UTF_8));
                    headers.add("codec", codec.getBytes(UTF_8));
                    sent.add(producer.send(new ProducerRecord<>(topic, i % 2, base + i, "key-" + i, value(i), headers)));
                }
                producer.flush();
            }
            for (int i = 0; i < count; i++) {
                RecordMetadata metadata = sent.get(i).get();
                Support.eq(i % 2, metadata.partition(), "partition of record " + i);
                Support.eq((long) i / 2, metadata.offset(), "offset of record " + i);
                Support.eq(base + i, metadata.timestamp(), "timestamp of record " + i);
            }
            List<ConsumerRecord<String, String>> records = Support.readAll(topic, 2, "read_uncommitted");
            Support.eq(count, records.size(), "records read back");
            Set<Integer> seen = new HashSet<>();
            for (ConsumerRecord<String, String> record : records) {
                int i = Integer.parseInt(record.key().substring("key-".length()));
                Support.check(seen.add(i), "record %d read twice", i);
                Support.eq(i % 2, record.partition(), "partition of " + record.key());
                Support.eq((long) i / 2, record.offset(), "offset of " + record.key());
                Support.eq(value(i), record.value(), "value of " + record.key());
                Support.eq(base + i, record.timestamp(), "timestamp of " + record.key());
                Support.eq(TimestampType.CREATE_TIME, record.timestampType(), "timestamp type of " + record.key());
                List<String> headers = new ArrayList<>();
                for (Header header : record.headers()) {
                    headers.add(header.key() + "=" + new String(header.value(), UTF_8));
                }
                Support.eq(List.of("index=" + i, "codec=" + codec), headers, "headers of " + record.key());
            }
            // Idempotence: one producer id, epoch 0, and a sequence that counted every record of the partition.
            Map<TopicPartition, List<ProducerState>> producers = new HashMap<>();
            for (TopicPartition tp : Support.partitions(topic, 2)) {
                producers.put(tp, Support.get(admin.describeProducers(List.of(tp)).partitionResult(tp)).activeProducers());
            }
            Set<Long> ids = new HashSet<>();
            for (int p = 0; p < 2; p++) {
                List<ProducerState> states = producers.get(new TopicPartition(topic, p));
                Support.eq(1, states.size(), "active producers of partition " + p + " " + states);
                ProducerState state = states.get(0);
                ids.add(state.producerId());
                Support.check(state.producerId() >= 0, "producer id %d", state.producerId());
                Support.eq(0, state.producerEpoch(), "producer epoch");
                Support.eq(count / 2 - 1, state.lastSequence(), "last sequence of partition " + p);
                Support.eq(base + count - 2 + p, state.lastTimestamp(), "last timestamp of partition " + p);
                Support.check(state.currentTransactionStartOffset().isEmpty(), "no transaction: %s", state);
            }
            Support.eq(1, ids.size(), "one producer id for both partitions");
        }
    }

    /** A LogAppendTime topic: the broker's clock replaces the producer's timestamps, in the answer and in the log. */
    static void logAppendTime() throws Exception {
        String topic = "java-produce-log-append-time";
        try (Admin admin = Support.admin()) {
            Support.get(admin.createTopics(List.of(new org.apache.kafka.clients.admin.NewTopic(topic, 1, (short) 1)
                    .configs(Map.of("message.timestamp.type", "LogAppendTime")))).all());
        }
        long before = System.currentTimeMillis();
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        try (KafkaProducer<String, String> producer = Support.producer(Map.of(
                ProducerConfig.COMPRESSION_TYPE_CONFIG, "gzip", ProducerConfig.LINGER_MS_CONFIG, 50))) {
            for (int i = 0; i < 5; i++) {
                sent.add(producer.send(new ProducerRecord<>(topic, 0, 1000L + i, "k" + i, "v" + i)));
            }
            producer.flush();
        }
        long after = System.currentTimeMillis();
        Set<Long> appended = new HashSet<>();
        for (Future<RecordMetadata> future : sent) {
            appended.add(future.get().timestamp());
        }
        Support.eq(1, appended.size(), "append times of one batch " + appended);
        long appendTime = appended.iterator().next();
        Support.check(appendTime >= before && appendTime <= after, "append time %d outside [%d, %d]", appendTime, before, after);
        List<ConsumerRecord<String, String>> records = Support.readAll(topic, 1, "read_uncommitted");
        Support.eq(5, records.size(), "records read back");
        for (ConsumerRecord<String, String> record : records) {
            Support.eq(TimestampType.LOG_APPEND_TIME, record.timestampType(), "timestamp type of " + record.key());
            Support.eq(appendTime, record.timestamp(), "timestamp of " + record.key());
        }
    }

    private static Map<String, Object> groupConfig(String group, String clientId) {
        return Map.of(ConsumerConfig.GROUP_ID_CONFIG, group, ConsumerConfig.CLIENT_ID_CONFIG, clientId,
                ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, 200, ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, 10_000);
    }

    private static void record(Map<TopicPartition, List<Long>> seen, Iterable<ConsumerRecord<String, String>> records) {
        for (ConsumerRecord<String, String> record : records) {
            seen.computeIfAbsent(new TopicPartition(record.topic(), record.partition()), tp -> new ArrayList<>())
                    .add(record.offset());
        }
    }

    private static Map<TopicPartition, OffsetAndMetadata> offsets(Set<TopicPartition> tps, long offset, String metadata) {
        Map<TopicPartition, OffsetAndMetadata> result = new HashMap<>();
        tps.forEach(tp -> result.put(tp, new OffsetAndMetadata(offset, metadata)));
        return result;
    }

    /** Two consumers split four partitions after the second joins; committed offsets are where each resumes. */
    static void groupRebalance() throws Exception {
        String topic = "java-group";
        String group = "java-group-g";
        Set<TopicPartition> all = new HashSet<>(Support.partitions(topic, 4));
        try (Admin admin = Support.admin()) {
            Support.createTopic(admin, topic, 4);
        }
        try (KafkaProducer<String, String> producer = Support.producer(Map.of())) {
            for (int i = 0; i < 40; i++) {
                producer.send(new ProducerRecord<>(topic, i % 4, "k" + i, "v" + i));
            }
            producer.flush();
        }
        try (KafkaConsumer<String, String> first = Support.consumer(groupConfig(group, "first"))) {
            first.subscribe(List.of(topic));
            Map<TopicPartition, List<Long>> seen = new HashMap<>();
            Support.waitUntil(() -> {
                record(seen, first.poll(Duration.ofMillis(100)));
                return seen.values().stream().mapToInt(List::size).sum() >= 40;
            }, "the first consumer to read all 40 records");
            Support.eq(all, first.assignment(), "the only member's assignment");
            first.commitSync(offsets(all, 5, "first"));
            Map<TopicPartition, OffsetAndMetadata> committed = first.committed(all);
            for (TopicPartition tp : all) {
                Support.eq(new OffsetAndMetadata(5, "first"), committed.get(tp), "committed offset of " + tp);
            }

            Map<TopicPartition, List<Long>> secondSeen = new HashMap<>();
            try (KafkaConsumer<String, String> second = Support.consumer(groupConfig(group, "second"))) {
                second.subscribe(List.of(topic));
                Support.waitUntil(() -> {
                    first.poll(Duration.ofMillis(50));
                    record(secondSeen, second.poll(Duration.ofMillis(50)));
                    return second.assignment().size() == 2 && first.assignment().size() == 2
                            && second.assignment().stream().allMatch(tp -> secondSeen.getOrDefault(tp, List.of()).size() >= 5);
                }, "the rebalance to give each consumer two partitions and the second its records");
                Set<TopicPartition> union = new HashSet<>(first.assignment());
                union.addAll(second.assignment());
                Support.eq(all, union, "both assignments together");
                for (TopicPartition tp : second.assignment()) {
                    Support.eq(List.of(5L, 6L, 7L, 8L, 9L), secondSeen.get(tp), "offsets the second consumer read on " + tp);
                }
                Support.eq(Set.of(), secondSeen.keySet().stream().filter(tp -> !second.assignment().contains(tp))
                        .collect(java.util.stream.Collectors.toSet()), "partitions the second read but does not own");
                first.commitSync(offsets(first.assignment(), 8, "first"));
                second.commitSync(offsets(second.assignment(), 8, "second"));
            }
            Support.waitUntil(() -> {
                first.poll(Duration.ofMillis(50));
                return first.assignment().size() == 4;
            }, "the first consumer to get all partitions back after the second left");
        }
        // A restarted member resumes at the committed offsets: exactly offsets 8 and 9 of every partition.
        try (KafkaConsumer<String, String> restarted = Support.consumer(groupConfig(group, "restarted"))) {
            restarted.subscribe(List.of(topic));
            Map<TopicPartition, List<Long>> seen = new TreeMap<>((a, b) -> Integer.compare(a.partition(), b.partition()));
            Support.waitUntil(() -> {
                record(seen, restarted.poll(Duration.ofMillis(100)));
                return restarted.assignment().size() == 4
                        && all.stream().allMatch(tp -> restarted.position(tp) == 10);
            }, "the restarted consumer to reach the end of all partitions");
            for (TopicPartition tp : all) {
                Support.eq(List.of(8L, 9L), seen.get(tp), "offsets read after restart on " + tp);
            }
        }
    }

    /** Consume-transform-produce with sendOffsetsToTransaction; aborted and open transactions stay invisible. */
    static void transactions() throws Exception {
        String in = "java-txn-in";
        String out = "java-txn-out";
        String group = "java-txn-g";
        TopicPartition input = new TopicPartition(in, 0);
        TopicPartition output = new TopicPartition(out, 0);
        try (Admin admin = Support.admin()) {
            Support.createTopic(admin, in, 1);
            Support.createTopic(admin, out, 1);
        }
        try (KafkaProducer<String, String> plain = Support.producer(Map.of());
             KafkaConsumer<String, String> consumer = Support.consumer(Map.of(ConsumerConfig.GROUP_ID_CONFIG, group,
                     ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed"));
             KafkaProducer<String, String> txn = Support.producer(Map.of(
                     ProducerConfig.TRANSACTIONAL_ID_CONFIG, "java-txn-ctp"))) {
            for (int i = 0; i < 15; i++) {
                plain.send(new ProducerRecord<>(in, "k" + i, "v" + i));
            }
            plain.flush();
            consumer.subscribe(List.of(in));
            List<ConsumerRecord<String, String>> inputs = new ArrayList<>();
            Support.waitUntil(() -> {
                consumer.poll(Duration.ofMillis(100)).forEach(inputs::add);
                return inputs.size() >= 15;
            }, "the transform to read its 15 input records");
            txn.initTransactions();

            txn.beginTransaction();
            for (ConsumerRecord<String, String> record : inputs.subList(0, 10)) {
                txn.send(new ProducerRecord<>(out, record.key(), record.value().toUpperCase()));
            }
            txn.sendOffsetsToTransaction(Map.of(input, new OffsetAndMetadata(10)), consumer.groupMetadata());
            txn.commitTransaction();
            Support.eq(10L, consumer.committed(Set.of(input)).get(input).offset(), "offset committed with the transaction");

            txn.beginTransaction();
            for (ConsumerRecord<String, String> record : inputs.subList(10, 15)) {
                txn.send(new ProducerRecord<>(out, record.key(), "ABORTED-" + record.value()));
            }
            txn.sendOffsetsToTransaction(Map.of(input, new OffsetAndMetadata(15)), consumer.groupMetadata());
            txn.flush();
            txn.abortTransaction();
            Support.eq(10L, consumer.committed(Set.of(input)).get(input).offset(), "offset after the aborted transaction");

            txn.beginTransaction();
            for (ConsumerRecord<String, String> record : inputs.subList(10, 15)) {
                txn.send(new ProducerRecord<>(out, record.key(), record.value().toUpperCase()));
            }
            txn.sendOffsetsToTransaction(Map.of(input, new OffsetAndMetadata(15)), consumer.groupMetadata());
            txn.commitTransaction();
            Support.eq(15L, consumer.committed(Set.of(input)).get(input).offset(), "offset committed by the third transaction");

            // Offsets: 0-9 data, 10 marker, 11-15 aborted, 16 marker, 17-21 data, 22 marker; then an open one at 23.
            txn.beginTransaction();
            txn.send(new ProducerRecord<>(out, "open", "OPEN-1"));
            txn.send(new ProducerRecord<>(out, "open", "OPEN-2"));
            txn.flush();
            List<String> expected = new ArrayList<>();
            for (int i = 0; i < 15; i++) {
                expected.add("V" + i);
            }
            Support.eq(expected, Support.values(Support.readAll(out, 1, "read_committed")),
                    "read_committed values while a transaction is open");
            try (KafkaConsumer<String, String> committed = Support.consumer(Map.of(
                    ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed"))) {
                Support.eq(23L, committed.endOffsets(List.of(output)).get(output), "read_committed end offset (LSO)");
            }
            List<String> uncommitted = Support.values(Support.readAll(out, 1, "read_uncommitted"));
            Support.eq(22, uncommitted.size(), "read_uncommitted record count " + uncommitted);
            Support.check(uncommitted.contains("ABORTED-v12") && uncommitted.contains("OPEN-2"),
                    "read_uncommitted sees aborted and open records: %s", uncommitted);
            txn.commitTransaction();
            expected.add("OPEN-1");
            expected.add("OPEN-2");
            List<ConsumerRecord<String, String>> all = Support.readAll(out, 1, "read_committed");
            Support.eq(expected, Support.values(all), "read_committed values after the last commit");
            List<Long> offsets = all.stream().map(ConsumerRecord::offset).toList();
            Support.eq(List.of(0L, 1L, 2L, 3L, 4L, 5L, 6L, 7L, 8L, 9L, 17L, 18L, 19L, 20L, 21L, 23L, 24L), offsets,
                    "offsets of committed records (markers and aborted records skipped)");
        }
    }

    /** A second producer with the same transactional.id fences the first. */
    static void fencing() throws Exception {
        String topic = "java-txn-fencing";
        try (Admin admin = Support.admin()) {
            Support.createTopic(admin, topic, 1);
        }
        Map<String, Object> config = Map.of(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "java-txn-fenced");
        try (KafkaProducer<String, String> old = Support.producer(config)) {
            old.initTransactions();
            old.beginTransaction();
            old.send(new ProducerRecord<>(topic, "old", "before")).get();
            try (KafkaProducer<String, String> fresh = Support.producer(config)) {
                fresh.initTransactions();
                fresh.beginTransaction();
                fresh.send(new ProducerRecord<>(topic, "new", "fresh")).get();
                fresh.commitTransaction();
            }
            Throwable error = null;
            try {
                old.send(new ProducerRecord<>(topic, "old", "after")).get();
                old.commitTransaction();
            } catch (ProducerFencedException | InvalidProducerEpochException e) {
                error = e;
            } catch (ExecutionException e) {
                error = e.getCause();
            }
            Support.check(error instanceof ProducerFencedException || error instanceof InvalidProducerEpochException,
                    "the fenced producer got %s", error);
        }
        Support.eq(List.of("fresh"), Support.values(Support.readAll(topic, 1, "read_committed")),
                "committed records (the fenced producer's open transaction was aborted)");
    }
}
