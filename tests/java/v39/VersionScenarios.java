import java.util.List;
import java.util.Map;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.common.config.ConfigResource;

/** The scenarios only the 3.9 client can run: calls Kafka 4.0 removed from the Admin API. */
final class VersionScenarios {
    private VersionScenarios() {
    }

    static void register(Map<String, Scenarios.Scenario> scenarios) {
        scenarios.put("admin_legacy_alter_configs", VersionScenarios::legacyAlterConfigs);
    }

    /** The legacy alterConfigs replaces a topic's whole set of overrides. */
    @SuppressWarnings("deprecation")
    static void legacyAlterConfigs() throws Exception {
        String topic = "java-admin-legacy-configs";
        ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        try (Admin admin = Support.admin()) {
            Support.get(admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1)
                    .configs(Map.of("cleanup.policy", "compact")))).all());
            Support.get(admin.alterConfigs(Map.of(resource, new Config(List.of(new ConfigEntry("retention.ms", "1234567")))))
                    .all());
            Config config = AdminScenarios.describeConfig(admin, resource);
            Support.eq("1234567", config.get("retention.ms").value(), "retention.ms after alterConfigs");
            Support.eq("delete", config.get("cleanup.policy").value(), "cleanup.policy after alterConfigs dropped it");
            Support.eq(ConfigEntry.ConfigSource.DEFAULT_CONFIG, config.get("cleanup.policy").source(), "cleanup.policy source");
        }
    }
}
