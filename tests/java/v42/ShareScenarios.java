import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ShareGroupDescription;
import org.apache.kafka.clients.admin.SharePartitionOffsetInfo;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.GroupIdNotFoundException;
import org.apache.kafka.common.errors.GroupNotEmptyException;
import org.apache.kafka.common.serialization.StringDeserializer;

/** Share groups (KIP-932) with Apache Kafka's 4.2 KafkaShareConsumer (run by tests/integration/test_share_groups_java.py). */
final class ShareScenarios {
    static final long SCENARIO_TIMEOUT_S = 60;
    static final Duration DEADLINE = Duration.ofSeconds(30);

    private ShareScenarios() {
    }

    static void register(Map<String, Scenarios.Scenario> scenarios) {
        scenarios.put("more_consumers_than_partitions", ShareScenarios::moreConsumersThanPartitions);
        scenarios.put("explicit_accept", ShareScenarios::explicitAccept);
        scenarios.put("release_redelivers", ShareScenarios::releaseRedelivers);
        scenarios.put("delivery_count_limit_archives", ShareScenarios::deliveryCountLimit);
        scenarios.put("admin_lists_and_describes", ShareScenarios::adminListsAndDescribes);
        scenarios.put("admin_share_group_offsets", ShareScenarios::adminShareGroupOffsets);
        scenarios.put("poll_through_a_share_load", ShareScenarios::pollThroughAShareLoad);
    }

    // ------------------------------------------------------------------ set-up

    /** A topic, and a share group reading it from the earliest offset (Kafka's default is the latest). */
    static void topicAndGroup(String topic, int partitions, String group, Map<String, String> groupConfigs)
            throws Exception {
        try (Admin admin = Support.admin()) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get();
            List<AlterConfigOp> ops = new ArrayList<>();
            ops.add(new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET));
            groupConfigs.forEach((k, v) -> ops.add(new AlterConfigOp(new ConfigEntry(k, v), AlterConfigOp.OpType.SET)));
            admin.incrementalAlterConfigs(Map.of(new ConfigResource(ConfigResource.Type.GROUP, group), ops)).all().get();
        }
    }

    /** Records sent one at a time, so that each is a batch of its own (share fetches acquire whole batches). */
    static void produce(String topic, int partitions, int count, String prefix) throws Exception {
        try (KafkaProducer<String, String> producer = Support.producer(Map.of(ProducerConfig.LINGER_MS_CONFIG, 0))) {
            for (int i = 0; i < count; i++) {
                producer.send(new ProducerRecord<>(topic, i % partitions, null, prefix + i)).get();
            }
        }
    }

    static KafkaShareConsumer<String, String> consumer(String group, boolean explicit, int maxPollRecords) {
        Map<String, Object> props = new HashMap<>();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, Support.bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, maxPollRecords);
        props.put("share.acknowledgement.mode", explicit ? "explicit" : "implicit");
        return new KafkaShareConsumer<>(props, new StringDeserializer(), new StringDeserializer());
    }

    /** Poll until at least one record comes (or fail after DEADLINE). */
    static ConsumerRecords<String, String> pollSome(KafkaShareConsumer<String, String> consumer) {
        long end = System.nanoTime() + DEADLINE.toNanos();
        while (System.nanoTime() < end) {
            ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
            if (!records.isEmpty()) {
                return records;
            }
        }
        throw new AssertionError("no record within " + DEADLINE);
    }

    static void check(boolean condition, String message) {
        Support.check(condition, "%s", message);
    }

    static List<String> values(ConsumerRecords<String, String> records) {
        List<String> out = new ArrayList<>();
        records.forEach(r -> out.add(r.value()));
        return out;
    }

    static void acknowledgeAll(KafkaShareConsumer<String, String> consumer, ConsumerRecords<String, String> records,
                               AcknowledgeType type) {
        records.forEach(r -> consumer.acknowledge(r, type));
        Map<?, ? extends java.util.Optional<?>> results = consumer.commitSync();
        results.forEach((tp, error) -> check(error.isEmpty(), "acknowledgement of " + tp + " failed: " + error));
    }

    // ------------------------------------------------------------------ scenarios

    /** Four consumers on two partitions: each receives records, none is delivered twice, all are delivered. */
    static void moreConsumersThanPartitions() throws Exception {
        String topic = "share-wide", group = "share-wide-group";
        int consumers = 4, total = 80;
        topicAndGroup(topic, 2, group, Map.of());
        produce(topic, 2, total, "r");
        Map<String, String> deliveredTo = new ConcurrentHashMap<>();
        Set<String> duplicates = ConcurrentHashMap.newKeySet();
        CountDownLatch eachHolds = new CountDownLatch(consumers);
        ExecutorService pool = Executors.newFixedThreadPool(consumers);
        List<Future<Integer>> futures = new ArrayList<>();
        for (int c = 0; c < consumers; c++) {
            String name = "c" + c;
            futures.add(pool.submit(() -> {
                int received = 0;
                try (KafkaShareConsumer<String, String> consumer = consumer(group, true, 5)) {
                    consumer.subscribe(List.of(topic));
                    ConsumerRecords<String, String> first = pollSome(consumer);
                    received += first.count();
                    first.forEach(r -> { if (deliveredTo.putIfAbsent(r.value(), name) != null) duplicates.add(r.value()); });
                    eachHolds.countDown();  // hold the first records (their locks) until every consumer has some
                    check(eachHolds.await(DEADLINE.toSeconds(), TimeUnit.SECONDS),
                            "not every consumer received records while the others held theirs");
                    acknowledgeAll(consumer, first, AcknowledgeType.ACCEPT);
                    long end = System.nanoTime() + DEADLINE.toNanos();
                    while (deliveredTo.size() < total && System.nanoTime() < end) {
                        ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                        records.forEach(r -> { if (deliveredTo.putIfAbsent(r.value(), name) != null) duplicates.add(r.value()); });
                        received += records.count();
                        acknowledgeAll(consumer, records, AcknowledgeType.ACCEPT);
                    }
                }
                return received;
            }));
        }
        for (Future<Integer> future : futures) {
            check(future.get(SCENARIO_TIMEOUT_S, TimeUnit.SECONDS) > 0, "a consumer received nothing");
        }
        pool.shutdown();
        check(duplicates.isEmpty(), "records delivered to two consumers although accepted: " + duplicates);
        check(deliveredTo.size() == total, "delivered " + deliveredTo.size() + " of " + total);
    }

    /** Accepted records are done: what comes next is only what was produced after. */
    static void explicitAccept() throws Exception {
        String topic = "share-accept", group = "share-accept-group";
        topicAndGroup(topic, 1, group, Map.of());
        produce(topic, 1, 5, "old");
        try (KafkaShareConsumer<String, String> consumer = consumer(group, true, 100)) {
            consumer.subscribe(List.of(topic));
            List<String> seen = new ArrayList<>();
            while (seen.size() < 5) {
                ConsumerRecords<String, String> records = pollSome(consumer);
                seen.addAll(values(records));
                records.forEach(r -> check(r.deliveryCount().orElse((short) 0) == 1, "first delivery count " + r.deliveryCount()));
                acknowledgeAll(consumer, records, AcknowledgeType.ACCEPT);
            }
            check(seen.equals(List.of("old0", "old1", "old2", "old3", "old4")), "first delivery: " + seen);
            produce(topic, 1, 2, "new");
            List<String> next = new ArrayList<>();
            while (next.size() < 2) {
                ConsumerRecords<String, String> records = pollSome(consumer);
                next.addAll(values(records));
                acknowledgeAll(consumer, records, AcknowledgeType.ACCEPT);
            }
            check(next.equals(List.of("new0", "new1")), "after accepting, delivered " + next);
        }
    }

    /** Released records come back, in offset order, with their delivery count raised. */
    static void releaseRedelivers() throws Exception {
        String topic = "share-release", group = "share-release-group";
        topicAndGroup(topic, 1, group, Map.of());
        produce(topic, 1, 3, "r");
        try (KafkaShareConsumer<String, String> consumer = consumer(group, true, 100)) {
            consumer.subscribe(List.of(topic));
            List<ConsumerRecord<String, String>> first = new ArrayList<>();
            while (first.size() < 3) {
                ConsumerRecords<String, String> records = pollSome(consumer);
                records.forEach(first::add);
                acknowledgeAll(consumer, records, AcknowledgeType.RELEASE);
            }
            List<ConsumerRecord<String, String>> again = new ArrayList<>();
            while (again.size() < 3) {
                ConsumerRecords<String, String> records = pollSome(consumer);
                records.forEach(again::add);
                acknowledgeAll(consumer, records, AcknowledgeType.ACCEPT);
            }
            for (int i = 0; i < 3; i++) {
                check(again.get(i).offset() == i && again.get(i).value().equals("r" + i), "redelivered " + again);
                check(again.get(i).deliveryCount().orElse((short) 0) == 2, "delivery count " + again.get(i).deliveryCount());
            }
        }
    }

    /** A record released group.share.delivery.count.limit times (2 on this broker) is archived, not redelivered. */
    static void deliveryCountLimit() throws Exception {
        String topic = "share-limit", group = "share-limit-group";
        topicAndGroup(topic, 1, group, Map.of());
        produce(topic, 1, 1, "poison");
        try (KafkaShareConsumer<String, String> consumer = consumer(group, true, 100)) {
            consumer.subscribe(List.of(topic));
            for (int attempt = 1; attempt <= 2; attempt++) {
                ConsumerRecords<String, String> records = pollSome(consumer);
                check(values(records).equals(List.of("poison0")), "attempt " + attempt + ": " + values(records));
                acknowledgeAll(consumer, records, AcknowledgeType.RELEASE);
            }
            produce(topic, 1, 1, "next");
            ConsumerRecords<String, String> records = pollSome(consumer);
            check(values(records).equals(List.of("next0")), "after the limit, delivered " + values(records));
            acknowledgeAll(consumer, records, AcknowledgeType.ACCEPT);
        }
    }

    /** Admin: the share group in listGroups (type filter), describeShareGroups with its member, deleteShareGroups. */
    static void adminListsAndDescribes() throws Exception {
        String topic = "share-admin", group = "share-admin-group";
        topicAndGroup(topic, 3, group, Map.of());
        try (KafkaShareConsumer<String, String> consumer = consumer(group, false, 100); Admin admin = Support.admin()) {
            consumer.subscribe(List.of(topic));
            consumer.poll(Duration.ofMillis(500));
            long end = System.nanoTime() + DEADLINE.toNanos();
            ShareGroupDescription description = null;
            while (System.nanoTime() < end) {
                try {
                    description = admin.describeShareGroups(List.of(group)).describedGroups().get(group).get();
                } catch (ExecutionException e) {  // until the consumer's first heartbeat created the group
                    check(e.getCause() instanceof GroupIdNotFoundException, "describe failed: " + e.getCause());
                    consumer.poll(Duration.ofMillis(200));
                    continue;
                }
                if (!description.members().isEmpty()
                        && !description.members().iterator().next().assignment().topicPartitions().isEmpty()) {
                    break;
                }
                consumer.poll(Duration.ofMillis(200));
            }
            check(description != null && description.members().size() == 1, "described " + description);
            check(description.members().iterator().next().assignment().topicPartitions().size() == 3,
                    "assignment " + description);
            Collection<GroupListing> shares = admin.listGroups(ListGroupsOptions.forShareGroups()).all().get();
            check(shares.stream().anyMatch(g -> g.groupId().equals(group) && g.type().orElse(null) == GroupType.SHARE),
                    "listed " + shares);
            Collection<GroupListing> consumers = admin.listGroups(ListGroupsOptions.forConsumerGroups()).all().get();
            check(consumers.stream().noneMatch(g -> g.groupId().equals(group)), "listed as a consumer group " + consumers);
            Support.fails(GroupNotEmptyException.class, admin.deleteShareGroups(List.of(group)).all(),
                    "deleting a share group with a member");
        }
        try (Admin admin = Support.admin()) {
            admin.deleteShareGroups(List.of(group)).all().get();
            Support.fails(GroupIdNotFoundException.class, admin.describeShareGroups(List.of(group)).all(),
                    "describing a deleted share group");
        }
    }

    /** Alter (on a group not yet created), list and delete a share group's start offsets with the 4.2 Admin, and a
     *  consumer then reads from the start offset set; altering while it is a member is GroupNotEmptyException. */
    static void adminShareGroupOffsets() throws Exception {
        String topic = "share-offsets", group = "share-offsets-group";
        TopicPartition tp = new TopicPartition(topic, 0);
        try (Admin admin = Support.admin()) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
            produce(topic, 1, 4, "o");
            admin.alterShareGroupOffsets(group, Map.of(tp, 1L)).all().get();
            Map<TopicPartition, SharePartitionOffsetInfo> listed = admin.listShareGroupOffsets(
                    Map.of(group, new ListShareGroupOffsetsSpec())).partitionsToOffsetInfo(group).get();
            check(listed.get(tp) != null && listed.get(tp).startOffset() == 1 && listed.get(tp).lag().orElse(-1L) == 3,
                    "listed " + listed);
        }
        try (KafkaShareConsumer<String, String> consumer = consumer(group, false, 100); Admin admin = Support.admin()) {
            consumer.subscribe(List.of(topic));
            List<String> values = new ArrayList<>();
            long end = System.nanoTime() + DEADLINE.toNanos();
            while (values.size() < 3 && System.nanoTime() < end) {
                consumer.poll(Duration.ofMillis(200)).forEach(r -> values.add(r.value()));
            }
            check(values.equals(List.of("o1", "o2", "o3")), "read " + values);
            Support.fails(GroupNotEmptyException.class, admin.alterShareGroupOffsets(group, Map.of(tp, 0L)).all(),
                    "altering the offsets of a share group with a member");
        }
        try (Admin admin = Support.admin()) {
            admin.deleteShareGroupOffsets(group, Set.of(topic)).all().get();
            Map<TopicPartition, SharePartitionOffsetInfo> after = admin.listShareGroupOffsets(
                    Map.of(group, new ListShareGroupOffsetsSpec().topicPartitions(List.of(tp))))
                    .partitionsToOffsetInfo(group).get();
            check(after.get(tp) == null || after.get(tp).startOffset() == -1, "after deletion " + after);
        }
    }

    /**
     * Polls the share group and topic that the system properties share.group and share.topic name (set up by
     * tests/cluster/test_share_load_java.py, whose share-partition cannot be loaded at first) until share.records
     * records come: poll() must not throw meanwhile (the 4.2 client throws IllegalStateException for a partition
     * error it does not expect, such as COORDINATOR_NOT_AVAILABLE). Each poll that threw is reported, and polling
     * goes on, to show whether the consumer recovers.
     */
    static void pollThroughAShareLoad() {
        String group = System.getProperty("share.group"), topic = System.getProperty("share.topic");
        int expected = Integer.parseInt(System.getProperty("share.records"));
        List<String> thrown = new ArrayList<>();
        List<String> received = new ArrayList<>();
        try (KafkaShareConsumer<String, String> consumer = consumer(group, false, 100)) {
            consumer.subscribe(List.of(topic));
            long end = System.nanoTime() + DEADLINE.toNanos();
            while (received.size() < expected && System.nanoTime() < end) {
                try {
                    received.addAll(values(consumer.poll(Duration.ofMillis(200))));
                } catch (RuntimeException e) {
                    thrown.add(e.getClass().getSimpleName() + ": " + e.getMessage());
                }
            }
        }
        check(thrown.isEmpty(), "poll() threw " + thrown.size() + " times (received " + received + "): " + thrown);
        check(received.size() == expected, "received " + received + ", expected " + expected + " records");
    }
}
