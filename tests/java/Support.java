import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/** Clients configured for the broker under test, and checks that fail saying what differed from Kafka. */
final class Support {
    static String bootstrap;
    static final Duration DEADLINE = Duration.ofSeconds(20);

    private Support() {
    }

    static Admin admin() {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 20_000);
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 10_000);
        return Admin.create(props);
    }

    /** A producer with the Java defaults (enable.idempotence=true, acks=all) unless `extra` says otherwise. */
    static KafkaProducer<String, String> producer(Map<String, Object> extra) {
        Map<String, Object> props = new HashMap<>();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 20_000);
        props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, 10_000);
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 20_000);
        props.putAll(extra);
        return new KafkaProducer<>(props, new StringSerializer(), new StringSerializer());
    }

    static KafkaConsumer<String, String> consumer(Map<String, Object> extra) {
        Map<String, Object> props = new HashMap<>();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        props.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 20_000);
        props.putAll(extra);
        return new KafkaConsumer<>(props, new StringDeserializer(), new StringDeserializer());
    }

    static void createTopic(Admin admin, String topic, int partitions) throws Exception {
        get(admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all());
    }

    static List<TopicPartition> partitions(String topic, int count) {
        List<TopicPartition> result = new ArrayList<>();
        for (int p = 0; p < count; p++) {
            result.add(new TopicPartition(topic, p));
        }
        return result;
    }

    /** Everything a consumer with this isolation level sees from the start up to its end offsets (LSO for read_committed). */
    static List<ConsumerRecord<String, String>> readAll(String topic, int partitionCount, String isolation) {
        try (KafkaConsumer<String, String> consumer = consumer(Map.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation))) {
            List<TopicPartition> tps = partitions(topic, partitionCount);
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            Map<TopicPartition, Long> end = consumer.endOffsets(tps);
            List<ConsumerRecord<String, String>> records = new ArrayList<>();
            long deadline = System.nanoTime() + DEADLINE.toNanos();
            while (!tps.stream().allMatch(tp -> consumer.position(tp) >= end.get(tp))) {
                check(System.nanoTime() < deadline, "%s: positions did not reach end offsets %s (got %d records)",
                        topic, end, records.size());
                consumer.poll(Duration.ofMillis(100)).forEach(records::add);
            }
            return records;
        }
    }

    static List<String> values(Collection<ConsumerRecord<String, String>> records) {
        return records.stream().map(ConsumerRecord::value).collect(Collectors.toList());
    }

    static void check(boolean condition, String format, Object... args) {
        if (!condition) {
            throw new AssertionError(String.format(format, args));
        }
    }

    static void eq(Object expected, Object actual, String what) {
        if (!Objects.equals(expected, actual)) {
            throw new AssertionError(what + ": expected <" + expected + "> but got <" + actual + ">");
        }
    }

    /** The future's value; a failure is thrown as the ExecutionException, whose trace names the scenario's line. */
    static <T> T get(KafkaFuture<T> future) throws Exception {
        return future.get(30, TimeUnit.SECONDS);
    }

    /** The future must fail with `type` (the error Kafka answers with); returns the exception. */
    static <T extends Throwable> T fails(Class<T> type, KafkaFuture<?> future, String what) throws Exception {
        try {
            Object value = future.get(30, TimeUnit.SECONDS);
            throw new AssertionError(what + ": expected " + type.getSimpleName() + " but it succeeded with " + value);
        } catch (ExecutionException e) {
            if (!type.isInstance(e.getCause())) {
                throw new AssertionError(what + ": expected " + type.getSimpleName() + " but got " + e.getCause(), e.getCause());
            }
            return type.cast(e.getCause());
        }
    }

    /** Poll a condition with a deadline (never a sleep as synchronization). */
    static void waitUntil(BooleanSupplier condition, String what) throws InterruptedException {
        long deadline = System.nanoTime() + DEADLINE.toNanos();
        while (!condition.getAsBoolean()) {
            check(System.nanoTime() < deadline, "timed out waiting for %s", what);
            Thread.sleep(50);
        }
    }
}
