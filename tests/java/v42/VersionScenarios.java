import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.DescribeClusterOptions;
import org.apache.kafka.clients.admin.FeatureMetadata;
import org.apache.kafka.clients.admin.ListTransactionsOptions;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;

/** The scenarios of the 4.2 client's own: transactions V2, the consumer group protocol, the new Admin calls. */
final class VersionScenarios {
    private VersionScenarios() {
    }

    static void register(Map<String, Scenarios.Scenario> scenarios) {
        scenarios.put("transactions_v2_epoch_per_transaction", VersionScenarios::transactionsV2);
        scenarios.put("consumer_protocol_group", VersionScenarios::consumerProtocolGroup);
        scenarios.put("admin_describe_42", VersionScenarios::adminDescribe);
        ShareScenarios.register(scenarios);
    }

    private static int epochOf(Admin admin, String transactionalId) throws Exception {
        return Support.get(admin.describeTransactions(List.of(transactionalId)).description(transactionalId))
                .producerEpoch();
    }

    /**
     * With transaction.version 2 finalized the producer runs transactions V2: no AddPartitionsToTxn (Produce v12 adds
     * the partition), EndTxn v5 bumps the epoch at every commit and abort, TxnOffsetCommit v5 adds the offsets.
     */
    static void transactionsV2() throws Exception {
        String topic = "java42-txn-v2";
        String transactionalId = "java42-txn-v2";
        try (Admin admin = Support.admin()) {
            FeatureMetadata features = Support.get(admin.describeFeatures().featureMetadata());
            Support.eq((short) 2, features.finalizedFeatures().get("transaction.version").maxVersionLevel(),
                    "finalized transaction.version");
            Support.createTopic(admin, topic, 2);
            try (KafkaProducer<String, String> producer = Support.producer(Map.of(
                    ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId));
                 KafkaConsumer<String, String> group = Support.consumer(Map.of(ConsumerConfig.GROUP_ID_CONFIG,
                         "java42-txn-v2-g"))) {
                producer.initTransactions();
                int initial = epochOf(admin, transactionalId);
                producer.beginTransaction();
                producer.send(new ProducerRecord<>(topic, 0, "k", "committed-1"));
                producer.send(new ProducerRecord<>(topic, 1, "k", "committed-2"));
                producer.sendOffsetsToTransaction(Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(7)),
                        group.groupMetadata());
                producer.commitTransaction();
                Support.eq(initial + 1, epochOf(admin, transactionalId), "epoch after the first commit (bumped by V2)");
                Support.eq(7L, group.committed(Set.of(new TopicPartition(topic, 0))).get(new TopicPartition(topic, 0))
                        .offset(), "offset committed with the transaction (TxnOffsetCommit v5)");

                producer.beginTransaction();
                producer.send(new ProducerRecord<>(topic, 0, "k", "aborted")).get();
                producer.abortTransaction();
                Support.eq(initial + 2, epochOf(admin, transactionalId), "epoch after the abort");

                producer.beginTransaction();
                producer.send(new ProducerRecord<>(topic, 1, "k", "committed-3"));
                producer.commitTransaction();
                Support.eq(initial + 3, epochOf(admin, transactionalId), "epoch after the second commit");
            }
        }
        List<String> committed = new ArrayList<>(Support.values(Support.readAll(topic, 2, "read_committed")));
        committed.sort(null);
        Support.eq(List.of("committed-1", "committed-2", "committed-3"), committed, "what read_committed sees");
        Support.eq(4, Support.readAll(topic, 2, "read_uncommitted").size(), "records read_uncommitted sees");
    }

    /** KIP-848: the consumer group protocol, its members described as such (ConsumerGroupDescribe v1's MemberType). */
    static void consumerProtocolGroup() throws Exception {
        String topic = "java42-consumer-protocol";
        String groupId = "java42-consumer-protocol-g";
        try (Admin admin = Support.admin()) {
            Support.createTopic(admin, topic, 3);
            try (KafkaProducer<String, String> producer = Support.producer(Map.of())) {
                for (int i = 0; i < 9; i++) {
                    producer.send(new ProducerRecord<>(topic, i % 3, "k" + i, "v" + i));
                }
                producer.flush();
            }
            try (KafkaConsumer<String, String> consumer = Support.consumer(Map.of(ConsumerConfig.GROUP_ID_CONFIG, groupId,
                    ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer"))) {
                consumer.subscribe(List.of(topic));
                List<ConsumerRecord<String, String>> seen = new ArrayList<>();
                Support.waitUntil(() -> {
                    consumer.poll(Duration.ofMillis(100)).forEach(seen::add);
                    return seen.size() >= 9;
                }, "the consumer to read the 9 records");
                consumer.commitSync();
                ConsumerGroupDescription group = Support.get(admin.describeConsumerGroups(List.of(groupId))
                        .describedGroups().get(groupId));
                Support.eq(GroupType.CONSUMER, group.type(), "group type");
                Collection<MemberDescription> members = group.members();
                Support.eq(1, members.size(), "members");
                MemberDescription member = members.iterator().next();
                Support.eq(java.util.Optional.of(true), member.upgraded(), "member uses the consumer protocol");
                Support.eq(3, member.assignment().topicPartitions().size(), "partitions assigned to the member");
                Support.eq(9L, Support.get(admin.listConsumerGroupOffsets(groupId).partitionsToOffsetAndMetadata())
                        .values().stream().mapToLong(OffsetAndMetadata::offset).sum(), "committed offsets");
            }
        }
    }

    /** The Admin calls whose 4.2 versions carry new fields. */
    static void adminDescribe() throws Exception {
        String topic = "java42-admin";
        try (Admin admin = Support.admin()) {
            Support.createTopic(admin, topic, 1);
            Support.eq(1, Support.get(admin.describeCluster(new DescribeClusterOptions().includeFencedBrokers(true))
                    .nodes()).size(), "brokers (none fenced)");
            Collection<ConfigResource> topics = Support.get(admin.listConfigResources(
                    Set.of(ConfigResource.Type.TOPIC), new org.apache.kafka.clients.admin.ListConfigResourcesOptions()).all());
            Support.check(topics.contains(new ConfigResource(ConfigResource.Type.TOPIC, topic)),
                    "listConfigResources(TOPIC) lists %s: %s", topic, topics);
            for (String id : List.of("java42-pattern-a", "java42-pattern-b", "java42-other")) {
                try (KafkaProducer<String, String> producer = Support.producer(Map.of(
                        ProducerConfig.TRANSACTIONAL_ID_CONFIG, id))) {
                    producer.initTransactions();
                }
            }
            Collection<TransactionListing> listed = Support.get(admin.listTransactions(
                    new ListTransactionsOptions().filterOnTransactionalIdPattern("java42-pattern-.*")).all());
            List<String> ids = new ArrayList<>();
            listed.forEach(listing -> ids.add(listing.transactionalId()));
            ids.sort(null);
            Support.eq(List.of("java42-pattern-a", "java42-pattern-b"), ids, "transactions matching the pattern");
        }
    }
}
