import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.AbortTransactionSpec;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.AlterConfigsOptions;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.CreatePartitionsOptions;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.DeleteRecordsResult;
import org.apache.kafka.clients.admin.DeletedRecords;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.DescribeConfigsOptions;
import org.apache.kafka.clients.admin.DescribeReplicaLogDirsResult.ReplicaLogDirInfo;
import org.apache.kafka.clients.admin.FenceProducersResult;
import org.apache.kafka.clients.admin.ListConsumerGroupsOptions;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.ListTopicsOptions;
import org.apache.kafka.clients.admin.ListTransactionsOptions;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.MemberToRemove;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.RemoveMembersFromConsumerGroupOptions;
import org.apache.kafka.clients.admin.RemoveMembersFromConsumerGroupResult;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.TopicListing;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.admin.TransactionState;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.ConsumerGroupState;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicCollection;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.TopicPartitionReplica;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.ElectionNotNeededException;
import org.apache.kafka.common.errors.GroupIdNotFoundException;
import org.apache.kafka.common.errors.GroupNotEmptyException;
import org.apache.kafka.common.errors.GroupSubscribedToTopicException;
import org.apache.kafka.common.errors.InvalidConfigurationException;
import org.apache.kafka.common.errors.InvalidPartitionsException;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.InvalidReplicaAssignmentException;
import org.apache.kafka.common.errors.InvalidReplicationFactorException;
import org.apache.kafka.common.errors.LogDirNotFoundException;
import org.apache.kafka.common.errors.NoReassignmentInProgressException;
import org.apache.kafka.common.errors.OffsetOutOfRangeException;
import org.apache.kafka.common.errors.PolicyViolationException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.errors.TransactionalIdNotFoundException;
import org.apache.kafka.common.errors.UnknownMemberIdException;
import org.apache.kafka.common.errors.UnknownTopicIdException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;

/** Every Admin method a ZooKeeper-mode Kafka 3.9 broker answers, checked against the values Kafka returns. */
final class AdminScenarios {
    private static final String MISSING = "java-no-such-topic";

    private AdminScenarios() {
    }

    private static void checkSingleReplica(TopicDescription description, int partitions) {
        Support.eq(partitions, description.partitions().size(), description.name() + " partition count");
        for (int p = 0; p < partitions; p++) {
            TopicPartitionInfo info = description.partitions().get(p);
            Support.eq(p, info.partition(), "partition index");
            Support.eq(0, info.leader().id(), "leader of partition " + p);
            Support.eq(List.of(0), info.replicas().stream().map(Node::id).toList(), "replicas of partition " + p);
            Support.eq(List.of(0), info.isr().stream().map(Node::id).toList(), "ISR of partition " + p);
        }
    }

    private static TopicDescription describe(Admin admin, String topic) throws Exception {
        return Support.get(admin.describeTopics(TopicCollection.ofTopicNames(List.of(topic))).allTopicNames()).get(topic);
    }

    /** createTopics, listTopics, describeTopics by name and by id, createPartitions, deleteTopics by name and by id. */
    static void topics() throws Exception {
        String topic = "java-admin-topics";
        try (Admin admin = Support.admin()) {
            CreateTopicsResult created = admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1)
                    .configs(Map.of("retention.ms", "3600000", "cleanup.policy", "compact"))));
            Support.get(created.all());
            Support.eq(2, Support.get(created.numPartitions(topic)), "created partition count");
            Support.eq(1, Support.get(created.replicationFactor(topic)), "created replication factor");
            Uuid id = Support.get(created.topicId(topic));
            Support.check(!Uuid.ZERO_UUID.equals(id), "created topic id is zero");
            Config config = Support.get(created.config(topic));
            Support.eq("3600000", config.get("retention.ms").value(), "created retention.ms");
            Support.eq(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, config.get("retention.ms").source(), "retention.ms source");
            Support.eq("compact", config.get("cleanup.policy").value(), "created cleanup.policy");
            Support.eq("1073741824", config.get("segment.bytes").value(), "created segment.bytes (default)");
            Support.eq(ConfigEntry.ConfigSource.DEFAULT_CONFIG, config.get("segment.bytes").source(), "segment.bytes source");

            Support.fails(TopicExistsException.class, admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all(),
                    "creating an existing topic");
            Support.fails(InvalidReplicationFactorException.class,
                    admin.createTopics(List.of(new NewTopic(topic + "-rf3", 1, (short) 3))).all(),
                    "replication factor 3 on one broker");
            Support.fails(InvalidPartitionsException.class,
                    admin.createTopics(List.of(new NewTopic(topic + "-p0", 0, (short) 1))).all(), "zero partitions");
            Support.get(admin.createTopics(List.of(new NewTopic(topic + "-dry", 3, (short) 1)),
                    new CreateTopicsOptions().validateOnly(true)).all());

            Set<String> names = Support.get(admin.listTopics().names());
            Support.check(names.contains(topic), "listTopics %s lacks %s", names, topic);
            Support.check(!names.contains(topic + "-dry"), "validateOnly created a topic: %s", names);
            Support.check(names.stream().noneMatch(n -> n.startsWith("__")), "internal topics listed by default: %s", names);
            TopicListing listing = Support.get(admin.listTopics(new ListTopicsOptions().listInternal(true)).namesToListings())
                    .get(topic);
            Support.eq(id, listing.topicId(), "listed topic id");
            Support.eq(false, listing.isInternal(), "listed internal flag");

            TopicDescription byName = describe(admin, topic);
            Support.eq(topic, byName.name(), "described name");
            Support.eq(id, byName.topicId(), "described topic id");
            Support.eq(false, byName.isInternal(), "described internal flag");
            checkSingleReplica(byName, 2);
            TopicDescription byId = Support.get(admin.describeTopics(TopicCollection.ofTopicIds(List.of(id))).allTopicIds())
                    .get(id);
            Support.eq(topic, byId.name(), "name described by id");
            Support.eq(id, byId.topicId(), "topic id described by id");
            checkSingleReplica(byId, 2);
            Support.fails(UnknownTopicOrPartitionException.class,
                    admin.describeTopics(TopicCollection.ofTopicNames(List.of(MISSING))).allTopicNames(), "describing a missing topic");
            Support.fails(UnknownTopicIdException.class,
                    admin.describeTopics(TopicCollection.ofTopicIds(List.of(Uuid.randomUuid()))).allTopicIds(),
                    "describing a missing topic id");

            Support.get(admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(4))).all());
            checkSingleReplica(describe(admin, topic), 4);
            Support.get(admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(6)),
                    new CreatePartitionsOptions().validateOnly(true)).all());
            Support.eq(4, describe(admin, topic).partitions().size(), "partitions after a validateOnly increase");
            Support.fails(InvalidPartitionsException.class,
                    admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(2))).all(), "decreasing partitions");
            Support.fails(InvalidPartitionsException.class,
                    admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(4))).all(), "the same partition count");
            Support.fails(UnknownTopicOrPartitionException.class,
                    admin.createPartitions(Map.of(MISSING, NewPartitions.increaseTo(2))).all(), "partitions of a missing topic");

            Support.get(admin.deleteTopics(TopicCollection.ofTopicNames(List.of(topic))).all());
            Support.check(!Support.get(admin.listTopics().names()).contains(topic), "deleted topic still listed");
            Support.fails(UnknownTopicOrPartitionException.class,
                    admin.deleteTopics(TopicCollection.ofTopicNames(List.of(topic))).all(), "deleting a deleted topic");

            String second = topic + "-by-id";
            CreateTopicsResult secondCreated = admin.createTopics(List.of(new NewTopic(second, 1, (short) 1)));
            Uuid secondId = Support.get(secondCreated.topicId(second));
            Support.get(admin.deleteTopics(TopicCollection.ofTopicIds(List.of(secondId))).all());
            Support.check(!Support.get(admin.listTopics().names()).contains(second), "topic deleted by id still listed");
            Support.fails(UnknownTopicIdException.class,
                    admin.deleteTopics(TopicCollection.ofTopicIds(List.of(Uuid.randomUuid()))).all(), "deleting a missing id");
        }
    }

    private static List<String> synonyms(ConfigEntry entry) {
        return entry.synonyms().stream().map(s -> s.name() + "=" + s.value() + ":" + s.source()).toList();
    }

    static Config describeConfig(Admin admin, ConfigResource resource) throws Exception {
        return Support.get(admin.describeConfigs(List.of(resource)).all()).get(resource);
    }

    private static void alter(Admin admin, ConfigResource resource, AlterConfigOp... ops) throws Exception {
        Support.get(admin.incrementalAlterConfigs(Map.of(resource, List.of(ops))).all());
    }

    private static AlterConfigOp op(String name, String value, AlterConfigOp.OpType type) {
        return new AlterConfigOp(new ConfigEntry(name, value), type);
    }

    /** describeConfigs (topic and broker, with synonyms) and incrementalAlterConfigs (SET, DELETE, APPEND, SUBTRACT). */
    static void configs() throws Exception {
        String topic = "java-admin-configs";
        ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        try (Admin admin = Support.admin()) {
            Support.get(admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1)
                    .configs(Map.of("retention.ms", "3600000")))).all());
            Config config = describeConfig(admin, resource);
            ConfigEntry retention = config.get("retention.ms");
            Support.eq("3600000", retention.value(), "retention.ms");
            Support.eq(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, retention.source(), "retention.ms source");
            Support.eq(false, retention.isReadOnly(), "retention.ms read-only");
            Support.eq(false, retention.isSensitive(), "retention.ms sensitive");
            Support.eq("delete", config.get("cleanup.policy").value(), "default cleanup.policy");
            Support.eq(ConfigEntry.ConfigSource.DEFAULT_CONFIG, config.get("cleanup.policy").source(), "cleanup.policy source");
            Support.eq(true, config.get("cleanup.policy").isDefault(), "cleanup.policy isDefault");

            // Kafka lists broker synonyms from the topic key's own broker key on: log.retention.hours only if
            // log.retention.ms is set; message.max.bytes has a default of its own.
            Config withSynonyms = Support.get(admin.describeConfigs(List.of(resource),
                    new DescribeConfigsOptions().includeSynonyms(true)).all()).get(resource);
            Support.eq(List.of("retention.ms=3600000:DYNAMIC_TOPIC_CONFIG"), synonyms(withSynonyms.get("retention.ms")),
                    "retention.ms synonyms");
            Support.eq(List.of("message.max.bytes=1048588:DEFAULT_CONFIG"), synonyms(withSynonyms.get("max.message.bytes")),
                    "max.message.bytes synonyms");

            alter(admin, resource, op("retention.ms", "7200000", AlterConfigOp.OpType.SET),
                    op("max.message.bytes", "2000000", AlterConfigOp.OpType.SET),
                    op("cleanup.policy", "compact", AlterConfigOp.OpType.APPEND));
            config = describeConfig(admin, resource);
            Support.eq("7200000", config.get("retention.ms").value(), "retention.ms after SET");
            Support.eq("2000000", config.get("max.message.bytes").value(), "max.message.bytes after SET");
            Support.eq(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, config.get("max.message.bytes").source(),
                    "max.message.bytes source");
            Support.eq("delete,compact", config.get("cleanup.policy").value(), "cleanup.policy after APPEND");

            alter(admin, resource, op("retention.ms", null, AlterConfigOp.OpType.DELETE),
                    op("cleanup.policy", "delete", AlterConfigOp.OpType.SUBTRACT));
            config = describeConfig(admin, resource);
            Support.eq("604800000", config.get("retention.ms").value(), "retention.ms after DELETE");
            Support.eq(ConfigEntry.ConfigSource.DEFAULT_CONFIG, config.get("retention.ms").source(), "retention.ms source after DELETE");
            Support.eq("compact", config.get("cleanup.policy").value(), "cleanup.policy after SUBTRACT");

            Support.get(admin.incrementalAlterConfigs(Map.of(resource, List.of(op("segment.ms", "100000", AlterConfigOp.OpType.SET))),
                    new AlterConfigsOptions().validateOnly(true)).all());
            Support.eq(ConfigEntry.ConfigSource.DEFAULT_CONFIG, describeConfig(admin, resource).get("segment.ms").source(),
                    "segment.ms source after a validateOnly SET");
            Support.fails(InvalidConfigurationException.class, admin.incrementalAlterConfigs(Map.of(resource,
                    List.of(op("retention.ms", "not-a-number", AlterConfigOp.OpType.SET)))).all(), "an invalid value");
            Support.fails(InvalidConfigurationException.class, admin.incrementalAlterConfigs(Map.of(resource,
                    List.of(op("no.such.config", "1", AlterConfigOp.OpType.SET)))).all(), "an unknown topic config");
            ConfigResource missing = new ConfigResource(ConfigResource.Type.TOPIC, MISSING);
            Support.fails(UnknownTopicOrPartitionException.class, admin.describeConfigs(List.of(missing)).all(),
                    "describing configs of a missing topic");
            Support.fails(UnknownTopicOrPartitionException.class, admin.incrementalAlterConfigs(Map.of(missing,
                    List.of(op("retention.ms", "1000", AlterConfigOp.OpType.SET)))).all(), "altering a missing topic");

            Config broker = describeConfig(admin, new ConfigResource(ConfigResource.Type.BROKER, "0"));
            Support.eq("0", broker.get("broker.id").value(), "broker.id");
            Support.eq(ConfigEntry.ConfigSource.STATIC_BROKER_CONFIG, broker.get("broker.id").source(), "broker.id source");
            Support.eq("1", broker.get("num.partitions").value(), "num.partitions");
            Support.eq(ConfigEntry.ConfigSource.DEFAULT_CONFIG, broker.get("num.partitions").source(), "num.partitions source");
            Support.eq("168", broker.get("log.retention.hours").value(), "log.retention.hours");
        }
    }

    /** describeCluster: the one broker, as the controller, and a cluster id. */
    static void cluster() throws Exception {
        try (Admin admin = Support.admin()) {
            DescribeClusterResult result = admin.describeCluster();
            String[] hostPort = Support.bootstrap.split(":");
            Collection<Node> nodes = Support.get(result.nodes());
            Support.eq(List.of("0@" + hostPort[0] + ":" + hostPort[1]),
                    nodes.stream().map(n -> n.id() + "@" + n.host() + ":" + n.port()).toList(), "nodes");
            Support.eq(0, Support.get(result.controller()).id(), "controller id");
            String clusterId = Support.get(result.clusterId());
            Support.check(clusterId != null && clusterId.length() == 22, "cluster id %s", clusterId);
            Support.eq(clusterId, Support.get(admin.describeCluster().clusterId()), "cluster id asked twice");
        }
    }

    private static ListOffsetsResultInfo offset(Admin admin, TopicPartition tp, OffsetSpec spec) throws Exception {
        return Support.get(admin.listOffsets(Map.of(tp, spec)).partitionResult(tp));
    }

    /** listOffsets: earliest, latest, max timestamp and by timestamp, in one batch (as a compressed producer sends them). */
    static void listOffsets() throws Exception {
        String topic = "java-admin-offsets";
        TopicPartition tp = new TopicPartition(topic, 0);
        long[] timestamps = {1000, 2000, 3000, 4000, 5000, 50_000, 7000, 8000, 9000, 10_000};
        try (Admin admin = Support.admin()) {
            Support.createTopic(admin, topic, 1);
            Support.eq(0L, offset(admin, tp, OffsetSpec.latest()).offset(), "latest of an empty partition");
            Support.eq(-1L, offset(admin, tp, OffsetSpec.maxTimestamp()).offset(), "max timestamp of an empty partition");
            try (KafkaProducer<String, String> producer = Support.producer(Map.of(
                    ProducerConfig.LINGER_MS_CONFIG, 1000, ProducerConfig.COMPRESSION_TYPE_CONFIG, "lz4"))) {
                for (long timestamp : timestamps) {
                    producer.send(new ProducerRecord<>(topic, 0, timestamp, "k", "t" + timestamp));
                }
                producer.flush();
            }
            ListOffsetsResultInfo earliest = offset(admin, tp, OffsetSpec.earliest());
            Support.eq(0L, earliest.offset(), "earliest offset");
            ListOffsetsResultInfo latest = offset(admin, tp, OffsetSpec.latest());
            Support.eq(10L, latest.offset(), "latest offset");
            Support.eq(Optional.of(0), latest.leaderEpoch(), "latest leader epoch");
            ListOffsetsResultInfo max = offset(admin, tp, OffsetSpec.maxTimestamp());
            Support.eq(5L, max.offset(), "offset of the max timestamp");
            Support.eq(50_000L, max.timestamp(), "max timestamp");
            ListOffsetsResultInfo at3500 = offset(admin, tp, OffsetSpec.forTimestamp(3500));
            Support.eq(3L, at3500.offset(), "first offset with timestamp >= 3500");
            Support.eq(4000L, at3500.timestamp(), "its timestamp");
            Support.eq(5L, offset(admin, tp, OffsetSpec.forTimestamp(6000)).offset(), "first offset with timestamp >= 6000");
            Support.eq(0L, offset(admin, tp, OffsetSpec.forTimestamp(0)).offset(), "first offset with timestamp >= 0");
            ListOffsetsResultInfo none = offset(admin, tp, OffsetSpec.forTimestamp(60_000));
            Support.eq(-1L, none.offset(), "offset for a timestamp after every record");
            Support.eq(-1L, none.timestamp(), "timestamp for a timestamp after every record");
            Support.eq(10L, Support.get(admin.listOffsets(Map.of(tp, OffsetSpec.latest()),
                    new ListOffsetsOptions(IsolationLevel.READ_COMMITTED)).partitionResult(tp)).offset(), "read_committed latest");
            TopicPartition missing = new TopicPartition(MISSING, 0);
            Support.fails(UnknownTopicOrPartitionException.class,
                    admin.listOffsets(Map.of(missing, OffsetSpec.latest())).partitionResult(missing), "a missing topic");
        }
    }

    private static ConsumerGroupDescription describeGroup(Admin admin, String group) throws Exception {
        return Support.get(admin.describeConsumerGroups(List.of(group)).all()).get(group);
    }

    private static Map<TopicPartition, OffsetAndMetadata> groupOffsets(Admin admin, String group) throws Exception {
        return Support.get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata());
    }

    private static Optional<ConsumerGroupListing> listed(Admin admin, String group, ListConsumerGroupsOptions options)
            throws Exception {
        return Support.get(admin.listConsumerGroups(options).all()).stream()
                .filter(listing -> listing.groupId().equals(group)).findFirst();
    }

    /** The group methods, on a group with a live member and then on the same group empty. */
    static void consumerGroups() throws Exception {
        String topic = "java-admin-groups";
        String group = "java-admin-g";
        TopicPartition tp0 = new TopicPartition(topic, 0);
        TopicPartition tp1 = new TopicPartition(topic, 1);
        try (Admin admin = Support.admin()) {
            Support.createTopic(admin, topic, 2);
            try (KafkaProducer<String, String> producer = Support.producer(Map.of())) {
                for (int i = 0; i < 6; i++) {
                    producer.send(new ProducerRecord<>(topic, i % 2, "k", "v" + i));
                }
                producer.flush();
            }
            try (KafkaConsumer<String, String> consumer = Support.consumer(Map.of(ConsumerConfig.GROUP_ID_CONFIG, group,
                    ConsumerConfig.CLIENT_ID_CONFIG, "admin-groups-client"))) {
                consumer.subscribe(List.of(topic));
                List<String> read = new ArrayList<>();
                Support.waitUntil(() -> {
                    consumer.poll(Duration.ofMillis(100)).forEach(r -> read.add(r.value()));
                    return read.size() >= 6;
                }, "the member to read its 6 records");
                consumer.commitSync(Map.of(tp0, new OffsetAndMetadata(3, "m0"), tp1, new OffsetAndMetadata(2)));

                ConsumerGroupListing listing = listed(admin, group, new ListConsumerGroupsOptions()).orElseThrow(
                        () -> new AssertionError("listConsumerGroups lacks the live group"));
                Support.eq(false, listing.isSimpleConsumerGroup(), "listed simple flag");
                Support.eq(Optional.of(ConsumerGroupState.STABLE), listing.state(), "listed state");
                Support.eq(Optional.of(GroupType.CLASSIC), listing.type(), "listed type");
                Support.check(listed(admin, group, new ListConsumerGroupsOptions().inStates(Set.of(ConsumerGroupState.STABLE)))
                        .isPresent(), "the STABLE filter drops the stable group");
                Support.check(listed(admin, group, new ListConsumerGroupsOptions().inStates(Set.of(ConsumerGroupState.EMPTY)))
                        .isEmpty(), "the EMPTY filter keeps the stable group");

                ConsumerGroupDescription description = describeGroup(admin, group);
                Support.eq(group, description.groupId(), "described group id");
                Support.eq(false, description.isSimpleConsumerGroup(), "described simple flag");
                Support.eq(ConsumerGroupState.STABLE, description.state(), "described state");
                Support.eq(GroupType.CLASSIC, description.type(), "described type");
                Support.eq("range", description.partitionAssignor(), "described assignor");
                Support.eq(0, description.coordinator().id(), "coordinator");
                Support.eq(1, description.members().size(), "member count");
                MemberDescription member = description.members().iterator().next();
                Support.eq("admin-groups-client", member.clientId(), "member client id");
                Support.check(member.consumerId().startsWith("admin-groups-client-"), "member id %s", member.consumerId());
                Support.eq("/127.0.0.1", member.host(), "member host");
                Support.eq(Optional.empty(), member.groupInstanceId(), "member instance id");
                Support.eq(Set.of(tp0, tp1), member.assignment().topicPartitions(), "member assignment");

                Support.eq(Map.of(tp0, new OffsetAndMetadata(3, "m0"), tp1, new OffsetAndMetadata(2)),
                        withoutEpochs(groupOffsets(admin, group)), "listed group offsets");
                Support.fails(UnknownMemberIdException.class, admin.alterConsumerGroupOffsets(group,
                        Map.of(tp0, new OffsetAndMetadata(0))).all(), "altering offsets of a live group");
                Support.fails(GroupSubscribedToTopicException.class,
                        admin.deleteConsumerGroupOffsets(group, Set.of(tp0)).all(), "deleting offsets of a subscribed topic");
                Support.fails(GroupNotEmptyException.class, admin.deleteConsumerGroups(List.of(group)).all(),
                        "deleting a live group");
            }

            ConsumerGroupDescription empty = describeGroup(admin, group);
            Support.eq(ConsumerGroupState.EMPTY, empty.state(), "state after the member left");
            Support.eq(0, empty.members().size(), "members after the member left");
            Support.eq("", empty.partitionAssignor(), "assignor of an empty group");
            Support.check(listed(admin, group, new ListConsumerGroupsOptions().inStates(Set.of(ConsumerGroupState.EMPTY)))
                    .isPresent(), "the EMPTY filter drops the empty group");

            Support.get(admin.alterConsumerGroupOffsets(group,
                    Map.of(tp0, new OffsetAndMetadata(1, "reset"), tp1, new OffsetAndMetadata(0))).all());
            Support.eq(Map.of(tp0, new OffsetAndMetadata(1, "reset"), tp1, new OffsetAndMetadata(0)),
                    withoutEpochs(groupOffsets(admin, group)), "group offsets after alterConsumerGroupOffsets");
            Support.get(admin.deleteConsumerGroupOffsets(group, Set.of(tp1)).all());
            Support.eq(Map.of(tp0, new OffsetAndMetadata(1, "reset")), withoutEpochs(groupOffsets(admin, group)),
                    "group offsets after deleteConsumerGroupOffsets");
            Support.fails(GroupIdNotFoundException.class, admin.deleteConsumerGroupOffsets("java-no-such-group",
                    Set.of(tp0)).all(), "deleting offsets of a missing group");

            Support.get(admin.deleteConsumerGroups(List.of(group)).all());
            Support.check(listed(admin, group, new ListConsumerGroupsOptions()).isEmpty(), "a deleted group is listed");
            Support.eq(Map.of(), groupOffsets(admin, group), "offsets of a deleted group");
            Support.fails(GroupIdNotFoundException.class, admin.deleteConsumerGroups(List.of(group)).all(),
                    "deleting a deleted group");
        }
    }

    private static Map<TopicPartition, OffsetAndMetadata> withoutEpochs(Map<TopicPartition, OffsetAndMetadata> offsets) {
        Map<TopicPartition, OffsetAndMetadata> result = new HashMap<>();
        offsets.forEach((tp, o) -> result.put(tp, new OffsetAndMetadata(o.offset(), o.metadata())));
        return result;
    }

    private static Set<String> listedTransactions(Admin admin, ListTransactionsOptions options) throws Exception {
        return Support.get(admin.listTransactions(options).all()).stream()
                .map(l -> l.transactionalId() + ":" + l.producerId() + ":" + l.state()).collect(Collectors.toSet());
    }

    /** describeProducers, listTransactions, describeTransactions and abortTransaction on a hanging transaction. */
    static void producersAndTransactions() throws Exception {
        String topic = "java-admin-txn";
        String txnId = "java-admin-txn-id";
        TopicPartition tp = new TopicPartition(topic, 0);
        try (Admin admin = Support.admin()) {
            Support.createTopic(admin, topic, 1);
            Support.eq(List.of(), Support.get(admin.describeProducers(List.of(tp)).partitionResult(tp)).activeProducers(),
                    "producers of an unwritten partition");
            long before = System.currentTimeMillis();
            try (KafkaProducer<String, String> producer = Support.producer(Map.of(
                    ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId, ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, 50_000))) {
                producer.initTransactions();
                producer.beginTransaction();
                for (int i = 0; i < 3; i++) {
                    producer.send(new ProducerRecord<>(topic, "k", "v" + i));
                }
                producer.flush();

                TransactionDescription description = Support.get(admin.describeTransactions(List.of(txnId)).description(txnId));
                long producerId = description.producerId();
                Support.eq(0, description.coordinatorId(), "transaction coordinator");
                Support.eq(TransactionState.ONGOING, description.state(), "transaction state");
                Support.eq(0, description.producerEpoch(), "transaction producer epoch");
                Support.eq(50_000L, description.transactionTimeoutMs(), "transaction timeout");
                Support.eq(Set.of(tp), description.topicPartitions(), "transaction partitions");
                long started = description.transactionStartTimeMs().orElse(-1);
                Support.check(started >= before && started <= System.currentTimeMillis(), "transaction start %d", started);
                Support.fails(TransactionalIdNotFoundException.class,
                        admin.describeTransactions(List.of("java-no-such-txn")).description("java-no-such-txn"),
                        "describing a missing transactional id");

                String entry = txnId + ":" + producerId + ":" + TransactionState.ONGOING;
                Support.check(listedTransactions(admin, new ListTransactionsOptions()).contains(entry), "listTransactions lacks %s", entry);
                Support.check(listedTransactions(admin, new ListTransactionsOptions().filterStates(Set.of(TransactionState.ONGOING)))
                        .contains(entry), "the ONGOING filter drops %s", entry);
                Support.check(!listedTransactions(admin, new ListTransactionsOptions()
                        .filterStates(Set.of(TransactionState.COMPLETE_COMMIT))).contains(entry), "the COMPLETE_COMMIT filter keeps %s", entry);
                Support.eq(Set.of(entry), listedTransactions(admin, new ListTransactionsOptions().filterProducerIds(Set.of(producerId))),
                        "transactions of producer " + producerId);

                List<ProducerState> states = Support.get(admin.describeProducers(List.of(tp)).partitionResult(tp)).activeProducers();
                Support.eq(1, states.size(), "active producers " + states);
                ProducerState state = states.get(0);
                Support.eq(producerId, state.producerId(), "partition's producer id");
                Support.eq(0, state.producerEpoch(), "partition's producer epoch");
                Support.eq(2, state.lastSequence(), "partition's last sequence");
                Support.eq(java.util.OptionalLong.of(0), state.currentTransactionStartOffset(), "open transaction's first offset");
                Support.eq(0L, Support.get(admin.listOffsets(Map.of(tp, OffsetSpec.latest()),
                        new ListOffsetsOptions(IsolationLevel.READ_COMMITTED)).partitionResult(tp)).offset(), "LSO with an open transaction");
                Support.eq(3L, offset(admin, tp, OffsetSpec.latest()).offset(), "high watermark with an open transaction");

                Support.get(admin.abortTransaction(new AbortTransactionSpec(tp, producerId, (short) 0,
                        state.coordinatorEpoch().orElse(0))).all());
                ProducerState aborted = Support.get(admin.describeProducers(List.of(tp)).partitionResult(tp)).activeProducers().get(0);
                Support.eq(java.util.OptionalLong.empty(), aborted.currentTransactionStartOffset(), "open transaction after abortTransaction");
                Support.eq(4L, Support.get(admin.listOffsets(Map.of(tp, OffsetSpec.latest()),
                        new ListOffsetsOptions(IsolationLevel.READ_COMMITTED)).partitionResult(tp)).offset(), "LSO after abortTransaction");
                Support.eq(List.of(), Support.values(Support.readAll(topic, 1, "read_committed")), "read_committed after abortTransaction");

                producer.abortTransaction();
                // The coordinator answers EndTxn once PrepareAbort is logged and writes the markers afterwards (as
                // Kafka's endTransaction does): the transaction is PREPARE_ABORT until its CompleteAbort is logged.
                TransactionDescription after;
                long deadline = System.nanoTime() + Support.DEADLINE.toNanos();
                while ((after = Support.get(admin.describeTransactions(List.of(txnId)).description(txnId))).state()
                        == TransactionState.PREPARE_ABORT) {
                    Support.check(System.nanoTime() < deadline, "still PREPARE_ABORT after %s", Support.DEADLINE);
                    Thread.sleep(50);
                }
                Support.eq(TransactionState.COMPLETE_ABORT, after.state(), "state after the producer's abort");
                Support.eq(Set.of(), after.topicPartitions(), "partitions after the producer's abort");
            }
        }
    }

    private static Map<TopicPartition, Optional<Throwable>> elect(Admin admin, ElectionType type, Set<TopicPartition> tps)
            throws Exception {
        return Support.get(admin.electLeaders(type, tps).partitions());
    }

    private static void electionFails(Map<TopicPartition, Optional<Throwable>> result, TopicPartition tp,
                                      Class<? extends Throwable> type, String what) {
        Optional<Throwable> error = result.get(tp);
        Support.check(error != null && error.isPresent() && type.isInstance(error.get()),
                "%s: expected %s for %s, got %s", what, type.getSimpleName(), tp, result);
    }

    /** electLeaders on one broker: the leader is already the preferred (and a live) replica. */
    static void electLeaders() throws Exception {
        String topic = "java-admin-elect";
        TopicPartition tp0 = new TopicPartition(topic, 0);
        TopicPartition tp1 = new TopicPartition(topic, 1);
        TopicPartition missing = new TopicPartition(MISSING, 0);
        TopicPartition beyond = new TopicPartition(topic, 7);
        try (Admin admin = Support.admin()) {
            Support.createTopic(admin, topic, 2);
            for (ElectionType type : ElectionType.values()) {
                Map<TopicPartition, Optional<Throwable>> result = elect(admin, type, Set.of(tp0, tp1, missing, beyond));
                electionFails(result, tp0, ElectionNotNeededException.class, type + " election");
                electionFails(result, tp1, ElectionNotNeededException.class, type + " election");
                electionFails(result, missing, UnknownTopicOrPartitionException.class, type + " election");
                electionFails(result, beyond, UnknownTopicOrPartitionException.class, type + " election");
            }
            checkSingleReplica(describe(admin, topic), 2);
        }
    }

    /** alterPartitionReassignments / listPartitionReassignments on one broker. */
    static void reassignments() throws Exception {
        String topic = "java-admin-reassign";
        TopicPartition tp = new TopicPartition(topic, 0);
        try (Admin admin = Support.admin()) {
            Support.createTopic(admin, topic, 1);
            Support.eq(Map.of(), Support.get(admin.listPartitionReassignments().reassignments()), "reassignments at rest");
            Support.get(admin.alterPartitionReassignments(Map.of(tp, Optional.of(new NewPartitionReassignment(List.of(0))))).all());
            Support.eq(Map.of(), Support.get(admin.listPartitionReassignments(Set.of(tp)).reassignments()),
                    "reassignments after one onto the current replicas");
            Support.fails(InvalidReplicaAssignmentException.class, admin.alterPartitionReassignments(
                    Map.of(tp, Optional.of(new NewPartitionReassignment(List.of(0, 1))))).all(), "a reassignment onto a missing broker");
            Support.fails(InvalidReplicaAssignmentException.class, admin.alterPartitionReassignments(
                    Map.of(tp, Optional.of(new NewPartitionReassignment(List.of(0, 0))))).all(), "a reassignment with a duplicate");
            Support.fails(NoReassignmentInProgressException.class, admin.alterPartitionReassignments(
                    Map.of(tp, Optional.empty())).all(), "cancelling no reassignment");
            TopicPartition missing = new TopicPartition(MISSING, 0);
            Support.fails(UnknownTopicOrPartitionException.class, admin.alterPartitionReassignments(
                    Map.of(missing, Optional.of(new NewPartitionReassignment(List.of(0))))).all(), "reassigning a missing topic");
            checkSingleReplica(describe(admin, topic), 1);
        }
    }

    /** fenceProducers on a transactional id with an open transaction: the epoch is bumped past the abort it forces. */
    static void fenceProducers() throws Exception {
        String topic = "java-admin-fence";
        String txnId = "java-admin-fence-id";
        try (Admin admin = Support.admin()) {
            Support.createTopic(admin, topic, 1);
            try (KafkaProducer<String, String> producer = Support.producer(Map.of(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId))) {
                producer.initTransactions();
                producer.beginTransaction();
                producer.send(new ProducerRecord<>(topic, "k", "fenced")).get();
                long producerId = Support.get(admin.describeTransactions(List.of(txnId)).description(txnId)).producerId();
                FenceProducersResult fenced = admin.fenceProducers(List.of(txnId));
                Support.get(fenced.all());
                Support.eq(producerId, Support.get(fenced.producerId(txnId)), "fenced producer id");
                // Kafka bumps the epoch once to abort the open transaction, answers CONCURRENT_TRANSACTIONS, and the
                // retried InitProducerId bumps it again.
                Support.eq((short) 2, Support.get(fenced.epochId(txnId)), "epoch after fencing");
                TransactionDescription after = Support.get(admin.describeTransactions(List.of(txnId)).description(txnId));
                Support.eq(2, after.producerEpoch(), "described epoch after fencing");
                Support.eq(TransactionState.EMPTY, after.state(), "state after fencing (the retried InitProducerId's)");
                Throwable error = null;
                try {
                    producer.commitTransaction();
                } catch (ProducerFencedException | InvalidProducerEpochException e) {
                    error = e;
                }
                Support.check(error != null, "the fenced producer committed");
            }
            Support.eq(List.of(), Support.values(Support.readAll(topic, 1, "read_committed")), "committed records after fencing");
        }
    }

    /** removeMembersFromConsumerGroup: a static member removed by its group.instance.id; an unknown one is refused. */
    static void removeMembers() throws Exception {
        String topic = "java-admin-remove";
        String group = "java-admin-remove-g";
        try (Admin admin = Support.admin()) {
            Support.createTopic(admin, topic, 1);
            try (KafkaConsumer<String, String> consumer = Support.consumer(Map.of(ConsumerConfig.GROUP_ID_CONFIG, group,
                    ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, "static-1"))) {
                consumer.subscribe(List.of(topic));
                Support.waitUntil(() -> {
                    consumer.poll(Duration.ofMillis(100));
                    return consumer.assignment().size() == 1;
                }, "the static member's assignment");
                MemberDescription member = describeGroup(admin, group).members().iterator().next();
                Support.eq(Optional.of("static-1"), member.groupInstanceId(), "described instance id");
                MemberToRemove unknown = new MemberToRemove("nobody");
                RemoveMembersFromConsumerGroupResult refused = admin.removeMembersFromConsumerGroup(group,
                        new RemoveMembersFromConsumerGroupOptions(List.of(unknown)));
                Support.fails(UnknownMemberIdException.class, refused.memberResult(unknown), "removing an unknown instance");
                Support.get(admin.removeMembersFromConsumerGroup(group,
                        new RemoveMembersFromConsumerGroupOptions(List.of(new MemberToRemove("static-1")))).all());
                ConsumerGroupDescription after = describeGroup(admin, group);
                Support.eq(List.of(), List.copyOf(after.members()), "members after removal");
                Support.eq(ConsumerGroupState.EMPTY, after.state(), "state after removal");
            }
        }
    }

    private static long lowWatermark(DeleteRecordsResult result, TopicPartition tp) throws Exception {
        DeletedRecords deleted = Support.get(result.lowWatermarks().get(tp));
        return deleted.lowWatermark();
    }

    /** deleteRecords: low watermarks, -1 meaning the high watermark, OffsetOutOfRange past it, PolicyViolation on a
     *  compact-only topic; the earliest offset and a consumer from the beginning start at the low watermark. */
    static void deleteRecords() throws Exception {
        String topic = "java-admin-delete-records";
        String compacted = "java-admin-delete-records-compacted";
        TopicPartition tp0 = new TopicPartition(topic, 0);
        TopicPartition tp1 = new TopicPartition(topic, 1);
        TopicPartition compactedTp = new TopicPartition(compacted, 0);
        try (Admin admin = Support.admin()) {
            Support.createTopic(admin, topic, 2);
            Support.get(admin.createTopics(List.of(new NewTopic(compacted, 1, (short) 1)
                    .configs(Map.of("cleanup.policy", "compact")))).all());
            try (KafkaProducer<String, String> producer = Support.producer(Map.of())) {
                for (int i = 0; i < 10; i++) {
                    producer.send(new ProducerRecord<>(topic, 0, "k", "v" + i));
                }
                for (int i = 0; i < 4; i++) {
                    producer.send(new ProducerRecord<>(topic, 1, "k", "w" + i));
                }
                producer.send(new ProducerRecord<>(compacted, 0, "k", "c"));
                producer.flush();
            }
            DeleteRecordsResult result = admin.deleteRecords(Map.of(
                    tp0, RecordsToDelete.beforeOffset(6), tp1, RecordsToDelete.beforeOffset(-1)));
            Support.eq(6L, lowWatermark(result, tp0), "low watermark after deleting before 6");
            Support.eq(4L, lowWatermark(result, tp1), "low watermark after deleting before the high watermark");
            Support.eq(6L, offset(admin, tp0, OffsetSpec.earliest()).offset(), "earliest offset after the deletion");
            Support.eq(4L, offset(admin, tp1, OffsetSpec.earliest()).offset(), "earliest offset of the emptied partition");
            Support.eq(6L, lowWatermark(admin.deleteRecords(Map.of(tp0, RecordsToDelete.beforeOffset(2))), tp0),
                    "low watermark after deleting before an offset already deleted");
            Support.fails(OffsetOutOfRangeException.class,
                    admin.deleteRecords(Map.of(tp0, RecordsToDelete.beforeOffset(11))).lowWatermarks().get(tp0),
                    "deleting past the high watermark");
            Support.fails(PolicyViolationException.class,
                    admin.deleteRecords(Map.of(compactedTp, RecordsToDelete.beforeOffset(1))).lowWatermarks().get(compactedTp),
                    "deleting from a compact-only topic");
        }
        List<String> left = Support.values(Support.readAll(topic, 2, "read_uncommitted"));
        Support.eq(List.of("v6", "v7", "v8", "v9"), left, "what a consumer reads from the beginning");
    }

    /** describeLogDirs, describeReplicaLogDirs and alterReplicaLogDirs (KIP-113) on the broker's one log dir. */
    static void logDirs() throws Exception {
        String topic = "java-admin-log-dirs";
        TopicPartition tp = new TopicPartition(topic, 0);
        TopicPartitionReplica replica = new TopicPartitionReplica(topic, 0, 0);
        try (Admin admin = Support.admin()) {
            Support.createTopic(admin, topic, 1);
            try (KafkaProducer<String, String> producer = Support.producer(Map.of())) {
                producer.send(new ProducerRecord<>(topic, 0, "k", "v"));
                producer.flush();
            }
            Map<String, LogDirDescription> dirs = Support.get(admin.describeLogDirs(List.of(0)).allDescriptions()).get(0);
            Support.eq(1, dirs.size(), "log dirs of broker 0");
            String dir = dirs.keySet().iterator().next();
            LogDirDescription description = dirs.get(dir);
            Support.eq(null, description.error(), "the log dir's error");
            Support.check(description.totalBytes().isPresent() && description.usableBytes().isPresent()
                    && description.usableBytes().getAsLong() <= description.totalBytes().getAsLong(),
                    "total and usable bytes: %s, %s", description.totalBytes(), description.usableBytes());
            ReplicaInfo info = description.replicaInfos().get(tp);
            Support.check(info != null && info.size() > 0 && info.offsetLag() == 0 && !info.isFuture(),
                    "the replica of %s: %s", tp, info);
            ReplicaLogDirInfo where = Support.get(admin.describeReplicaLogDirs(List.of(replica)).all()).get(replica);
            Support.eq(dir, where.getCurrentReplicaLogDir(), "the replica's current log dir");
            Support.eq(null, where.getFutureReplicaLogDir(), "the replica's future log dir");
            Support.get(admin.alterReplicaLogDirs(Map.of(replica, dir)).all());
            Support.fails(LogDirNotFoundException.class,
                    admin.alterReplicaLogDirs(Map.of(replica, "/not/a/log/dir")).values().get(replica),
                    "moving to a dir that is not in log.dirs");
        }
    }
}
