"""Broker configuration: every key declared once, as data, with Kafka's names and defaults.

A key has a type, a default, an optional validator and a doc line. `BrokerConfig` parses a
Java-style `.properties` file plus `--override key=value` pairs, converts each value to its
type and validates it; an invalid value raises `ConfigError` naming the key. Keys that are not
declared are kept (as strings) and reported, as Kafka does with "not a known config".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from pybroker.common.config_error import ConfigError
from pybroker.common.listeners import Listeners, listeners_from_config, parse_listener

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


Validator = Callable[[str, Any], None]


@dataclass(frozen=True, slots=True)
class AtLeast:
    """Kafka's ConfigDef.Range.atLeast."""

    minimum: int | float

    def reason(self, value: Any) -> str | None:
        return None if value is None or value >= self.minimum else f"Value must be at least {self.minimum}"

    def __call__(self, key: str, value: Any) -> None:
        _raise(key, value, self.reason(value))


@dataclass(frozen=True, slots=True)
class Between:
    """Kafka's ConfigDef.Range.between."""

    minimum: int | float
    maximum: int | float

    def reason(self, value: Any) -> str | None:
        if value is None or self.minimum <= value <= self.maximum:
            return None
        return f"Value must be between {self.minimum} and {self.maximum}"

    def __call__(self, key: str, value: Any) -> None:
        _raise(key, value, self.reason(value))


@dataclass(frozen=True, slots=True)
class OneOf:
    """Kafka's ValidString; for a list (or a comma-separated string) ValidList: each item one of the choices."""

    choices: tuple[str, ...]
    listed: bool = False  # the value is a comma-separated string of items (a topic's cleanup.policy)

    def bad_item(self, value: Any) -> Any:
        """The first item that is not a choice, or None."""
        if value is None:
            return None
        if isinstance(value, list) or self.listed:
            items = value if isinstance(value, list) else [item.strip() for item in str(value).split(",")]
            return next((item for item in items if item and item not in self.choices), None)
        return None if value in self.choices else value

    def reason(self, value: Any) -> str | None:
        return None if self.bad_item(value) is None else f"String must be one of: {', '.join(self.choices)}"

    def __call__(self, key: str, value: Any) -> None:
        _raise(key, self.bad_item(value), self.reason(value))


def _raise(key: str, value: Any, reason: str | None) -> None:
    if reason is not None:
        raise ConfigError(f"Invalid value {value} for configuration {key}: {reason}")


def at_least(minimum: int | float) -> Validator:
    return AtLeast(minimum)


def between(minimum: int | float, maximum: int | float) -> Validator:
    return Between(minimum, maximum)


def one_of(*choices: str) -> Validator:
    return OneOf(choices)


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One declared configuration key."""

    name: str
    type: str  # "int", "long", "double", "boolean", "string", "list", "password"
    default: Any
    doc: str
    validator: Validator | None = None
    # Name of the topic-level config that this broker key provides the default for.
    topic_key: str | None = None


def parse_value(name: str, key: ConfigKey, raw: str) -> Any:
    """``raw`` converted to ``key``'s type and validated; ConfigError naming ``name``, the key as the user wrote it
    (a topic key whose default ``key`` provides, a ``listener.name.<l>.`` key)."""
    value = _parse(key, raw, name)
    if key.validator is not None:
        key.validator(name, value)
    return value


def _parse(key: ConfigKey, raw: str, name: str | None = None) -> Any:
    text = raw.strip()
    try:
        if key.type in ("int", "long"):
            value: Any = int(text)
            limit = INT_MAX if key.type == "int" else LONG_MAX
            if not -limit - 1 <= value <= limit:
                raise ValueError(text)
            return value
        if key.type == "double":
            return float(text)
        if key.type == "boolean":
            if text.lower() not in ("true", "false"):
                raise ValueError(text)
            return text.lower() == "true"
        if key.type == "list":
            return [item.strip() for item in text.split(",") if item.strip()]
        return raw if key.type == "password" else text
    except ValueError:
        raise ConfigError(
            f"Invalid value {raw!r} for configuration {name or key.name}: Expected value to be of type {key.type}"
        ) from None


_KEYS: list[ConfigKey] = [
    # Identity and cluster
    ConfigKey("broker.id", "int", -1, "The broker id; -1 lets the broker pick one (0 in single-node mode).", at_least(-1)),
    ConfigKey("broker.rack", "string", None, "Rack of the broker, used for rack-aware replica assignment."),
    ConfigKey("zookeeper.connect", "string", None, "ZooKeeper connection string host:port[,host:port][/chroot]. Unset = embedded single-node metadata."),
    ConfigKey("zookeeper.session.timeout.ms", "int", 18000, "ZooKeeper session timeout.", at_least(1)),
    ConfigKey("zookeeper.connection.timeout.ms", "int", None, "Max time to wait for a ZooKeeper connection; defaults to the session timeout."),
    # Replication and controller (ZooKeeper mode)
    ConfigKey("replica.lag.time.max.ms", "long", 30000, "A follower not caught up for this long leaves the ISR.", at_least(1)),
    ConfigKey("replica.fetch.wait.max.ms", "int", 500, "Longest a follower's fetch waits at the leader for data.", at_least(0)),
    ConfigKey("replica.fetch.min.bytes", "int", 1, "Bytes a follower's fetch waits for at the leader.", at_least(1)),
    ConfigKey("replica.fetch.max.bytes", "int", 1048576, "Bytes a follower fetches per partition per request.", at_least(0)),
    ConfigKey("replica.fetch.response.max.bytes", "int", 10485760, "Bytes a follower fetches per request.", at_least(0)),
    ConfigKey("replica.alter.log.dirs.io.max.bytes.per.second", "long", 9223372036854775807,
              "Bytes per second copied into replicas moving between log dirs (AlterReplicaLogDirs).", at_least(1)),
    ConfigKey("replica.fetch.backoff.ms", "int", 1000, "Pause of a follower after a failed fetch.", at_least(0)),
    ConfigKey("replica.socket.timeout.ms", "int", 30000, "Timeout of a follower's requests to its leader.", at_least(1)),
    ConfigKey("controller.socket.timeout.ms", "int", 30000, "Timeout of the controller's requests to brokers.", at_least(1)),
    ConfigKey("controlled.shutdown.enable", "boolean", True, "On SIGTERM, ask the controller to move leadership off this broker first."),
    ConfigKey("controlled.shutdown.max.retries", "int", 3, "Controlled shutdown attempts before shutting down regardless.", at_least(0)),
    ConfigKey("controlled.shutdown.retry.backoff.ms", "long", 5000, "Pause between controlled shutdown attempts.", at_least(0)),
    ConfigKey("auto.leader.rebalance.enable", "boolean", True, "The controller moves leadership back to preferred replicas."),
    ConfigKey("leader.imbalance.check.interval.seconds", "long", 300, "How often the controller checks leader balance.", at_least(1)),
    ConfigKey("leader.imbalance.per.broker.percentage", "int", 10, "Share of a broker's preferred partitions led elsewhere that triggers a rebalance.", at_least(0)),
    # Network
    ConfigKey("listeners", "list", ["PLAINTEXT://:9092"], "Listener URIs the broker binds, e.g. PLAINTEXT://127.0.0.1:9092."),
    ConfigKey("advertised.listeners", "list", None, "Listener URIs published to clients; defaults to listeners. Each request is answered with the endpoints of the listener it came in on."),
    ConfigKey("listener.security.protocol.map", "string", "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL", "Security protocol of each listener name, e.g. INTERNAL:SSL,EXTERNAL:SASL_SSL."),
    ConfigKey("inter.broker.listener.name", "string", None, "Listener other brokers connect to; exclusive with security.inter.broker.protocol."),
    ConfigKey("security.inter.broker.protocol", "string", "PLAINTEXT", "Inter-broker listener given by its protocol (the listener of that name).", one_of("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")),
    ConfigKey("control.plane.listener.name", "string", None, "Optional listener for the controller's requests (bound and registered; pybroker's controller still uses the inter-broker listener)."),
    # TLS (SSL and SASL_SSL listeners); each key can be set per listener as listener.name.<name>.<key>
    ConfigKey("ssl.keystore.type", "string", "JKS", "Format of the key store: only PEM is supported (JKS and PKCS12 are refused at start-up)."),
    ConfigKey("ssl.keystore.location", "string", None, "PEM file holding the private key and the certificate chain."),
    ConfigKey("ssl.keystore.password", "password", None, "Not used with PEM (Kafka refuses it with PEM too); use ssl.key.password."),
    ConfigKey("ssl.keystore.certificate.chain", "password", None, "The certificate chain in PEM, inline (instead of ssl.keystore.location)."),
    ConfigKey("ssl.keystore.key", "password", None, "The private key in PEM (PKCS#8), inline (instead of ssl.keystore.location)."),
    ConfigKey("ssl.key.password", "password", None, "Password of an encrypted private key."),
    ConfigKey("ssl.truststore.type", "string", "JKS", "Format of the trust store: only PEM is supported."),
    ConfigKey("ssl.truststore.location", "string", None, "PEM file of the CA certificates trusted for client certificates (and by the inter-broker client)."),
    ConfigKey("ssl.truststore.password", "password", None, "Not used with PEM."),
    ConfigKey("ssl.truststore.certificates", "password", None, "Trusted CA certificates in PEM, inline."),
    ConfigKey("ssl.client.auth", "string", "none", "Client certificates: none, requested (verified if sent) or required (mTLS).", one_of("none", "requested", "required")),
    ConfigKey("ssl.protocol", "string", "TLSv1.3", "Accepted for compatibility; the versions come from ssl.enabled.protocols."),
    ConfigKey("ssl.enabled.protocols", "list", ["TLSv1.2", "TLSv1.3"], "TLS versions accepted.", one_of("TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3")),
    ConfigKey("ssl.cipher.suites", "list", [], "TLS 1.2 cipher suites in OpenSSL's names (empty: OpenSSL's defaults); TLS 1.3 suites are always OpenSSL's."),
    ConfigKey("ssl.endpoint.identification.algorithm", "string", "https", "https: the inter-broker client checks the server certificate's host name; empty: it does not."),
    ConfigKey("ssl.principal.mapping.rules", "string", "DEFAULT", "Rules mapping a client certificate's distinguished name to a principal name (RULE:pattern/replacement/[LU],...,DEFAULT)."),
    # SASL (SASL_PLAINTEXT and SASL_SSL listeners); per listener as listener.name.<name>.<key>, and
    # listener.name.<name>.<mechanism>.sasl.jaas.config for each mechanism's JAAS options
    ConfigKey("sasl.enabled.mechanisms", "list", ["GSSAPI"], "SASL mechanisms a SASL listener offers: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER (Kafka's default GSSAPI is refused at start-up)."),
    ConfigKey("sasl.mechanism.inter.broker.protocol", "string", "GSSAPI", "Mechanism brokers use on a SASL inter-broker listener, with the username/password of that listener's JAAS config."),
    ConfigKey("sasl.jaas.config", "password", None, "JAAS login module options, e.g. org.apache.kafka.common.security.plain.PlainLoginModule required username=\"admin\" password=\"...\" user_alice=\"...\";"),
    ConfigKey("sasl.server.max.receive.size", "int", 524288, "Largest frame accepted before a SASL connection is authenticated.", at_least(1)),
    ConfigKey("sasl.server.callback.handler.class", "string", None, "OAUTHBEARER's validator (as listener.name.<l>.oauthbearer.sasl.server.callback.handler.class): Kafka's OAuthBearerValidatorCallbackHandler (JWT against sasl.oauthbearer.jwks.endpoint.url) or OAuthBearerUnsecuredValidatorCallbackHandler; unset: JWT when a JWKS URL is set, else unsecured."),
    # OAUTHBEARER token validation; also per listener and mechanism as listener.name.<l>.oauthbearer.<key>
    ConfigKey("sasl.oauthbearer.jwks.endpoint.url", "string", None, "JSON Web Key Set (file:// or http(s)://) whose keys sign OAUTHBEARER tokens; unset: Kafka's unsecured validator (alg none, development only)."),
    ConfigKey("sasl.oauthbearer.jwks.endpoint.refresh.ms", "long", 3600000, "How often the JWKS is read again (also at once for an unknown key id).", at_least(0)),
    ConfigKey("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", "long", 100, "Least time between two early JWKS reads (unknown key ids, unanswered fetches).", at_least(0)),
    ConfigKey("sasl.oauthbearer.expected.audience", "list", [], "Audiences of which a token's aud claim must name one (empty: aud not checked)."),
    ConfigKey("sasl.oauthbearer.expected.issuer", "string", None, "The iss claim a token must carry (unset: not checked)."),
    ConfigKey("sasl.oauthbearer.sub.claim.name", "string", "sub", "Claim holding the principal name."),
    ConfigKey("sasl.oauthbearer.scope.claim.name", "string", "scope", "Claim holding the token's scope."),
    ConfigKey("sasl.oauthbearer.clock.skew.seconds", "int", 30, "Clock skew allowed when checking a token's exp.", at_least(0)),
    ConfigKey("connections.max.reauth.ms", "long", 0, "Session lifetime of a SASL connection (KIP-368): past it, the client must re-authenticate or is disconnected; 0 = unlimited.", at_least(0)),
    # Authorization (ACLs)
    ConfigKey("authorizer.class.name", "string", "", "The authorizer: kafka.security.authorizer.AclAuthorizer or org.apache.kafka.metadata.authorizer.StandardAuthorizer (the same rules); empty: none, ACL APIs answer SECURITY_DISABLED."),
    ConfigKey("super.users", "string", None, "Principals allowed everything, whatever the ACLs say, separated by semicolons (User:admin;User:broker)."),
    ConfigKey("allow.everyone.if.no.acl.found", "boolean", False, "Allow a request on a resource that has no ACL at all."),
    ConfigKey("connection.failed.authentication.delay.ms", "int", 100, "Delay of the answer to a failed authentication, after which the connection is closed.", at_least(0)),
    ConfigKey("num.network.threads", "int", 3, "Accepted for compatibility; pybroker serves all connections on one event loop.", at_least(1)),
    ConfigKey("num.io.threads", "int", 8, "Accepted for compatibility; pybroker serves all connections on one event loop.", at_least(1)),
    ConfigKey("background.threads", "int", 10, "Threads of the pybroker-io pool that runs log flushes and checkpoint writes off the event loop.", at_least(1)),
    ConfigKey("socket.send.buffer.bytes", "int", 102400, "SO_SNDBUF for client sockets (-1 = OS default)."),
    ConfigKey("socket.receive.buffer.bytes", "int", 102400, "SO_RCVBUF for client sockets (-1 = OS default)."),
    ConfigKey("socket.request.max.bytes", "int", 104857600, "Largest request frame accepted; checked before the frame is buffered.", at_least(1)),
    ConfigKey("queued.max.requests", "int", 500, "Requests being handled, over all connections, before the broker stops reading new ones.", at_least(1)),
    ConfigKey("queued.max.request.bytes", "long", -1, "Bytes of requests being received or handled before the broker stops reading new ones (-1 = unbounded); a frame's declared size is counted from its size prefix.", at_least(-1)),
    ConfigKey("queued.max.requests.per.connection", "int", 32, "pybroker's own: requests of one connection handled at once (Kafka handles one); past it, or while the client does not read its responses, the broker stops reading from it.", at_least(1)),
    ConfigKey("max.connections", "int", INT_MAX, "Connections the broker holds; at the limit it stops accepting until one closes.", at_least(0)),
    ConfigKey("max.connections.per.ip", "int", INT_MAX, "Connections from one IP address; more are closed at once.", at_least(0)),
    ConfigKey("max.connection.creation.rate", "int", INT_MAX, "New connections per second the broker accepts (KIP-612; also per listener as listener.name.<l>.max.connection.creation.rate); past it the listener waits before accepting more. The inter-broker listener, when there are several, counts against its listener bound only.", at_least(0)),
    ConfigKey("max.connections.per.ip.overrides", "string", "", "Per-host limits overriding max.connections.per.ip, e.g. hostName:100,127.0.0.1:200."),
    ConfigKey("connections.max.idle.ms", "long", 600000, "Connections with no traffic and no request in progress are closed after this long.", at_least(1)),
    ConfigKey("open.files.headroom", "int", 1024, "pybroker's own (Kafka has none): descriptors of the open files limit (RLIMIT_NOFILE, raised to its hard limit at start-up) kept free for connections, replication, the log cleaner and flushes; a CreateTopics or CreatePartitions whose partitions would leave fewer is refused with POLICY_VIOLATION. At most a quarter of the limit is kept.", at_least(0)),
    ConfigKey("request.receive.timeout.ms", "long", 60000, "pybroker's own (Kafka has none): a connection's first request, and any request once its first byte arrived, must be received within this long, or the connection is closed (slow clients holding memory).", at_least(1)),
    # Client quotas (the quotas themselves are dynamic entity configs: pybroker configs --entity-type users|clients)
    ConfigKey("quota.window.num", "int", 11, "Samples kept for client quota rates.", at_least(1)),
    ConfigKey("quota.window.size.seconds", "int", 1, "Time span of each client quota sample.", at_least(1)),
    ConfigKey("telemetry.max.bytes", "int", 1048576, "Largest client telemetry push (KIP-714) accepted, compressed or not.", at_least(1)),
    # Metrics (pybroker's own: Kafka exposes JMX, pybroker Prometheus text)
    ConfigKey("metrics.port", "int", -1, "Port serving Prometheus text at /metrics; -1 = off, 0 = any free port (logged).", between(-1, 65535)),
    ConfigKey("metrics.host", "string", "127.0.0.1", "Address the /metrics endpoint binds; loopback by default so metrics are not published by accident."),
    # Schema registry (Confluent's REST API, served by the broker; pybroker.schema_registry)
    ConfigKey("schema.registry.listeners", "list", [], "URL the schema registry serves, http://host:port or https://host:port (port 0: any free port, logged); empty: off."),
    ConfigKey("schema.registry.topic", "string", "_schemas", "Compacted topic holding the registry's schemas and configs (Confluent's kafkastore.topic)."),
    ConfigKey("schema.registry.topic.replication.factor", "int", 3, "Replication factor of the registry topic, capped at the live brokers (kafkastore.topic.replication.factor).", at_least(1)),
    ConfigKey("schema.registry.timeout.ms", "int", 10000, "How long a registry write waits for the topic and its reader (kafkastore.timeout.ms).", at_least(1)),
    ConfigKey("schema.registry.compatibility.level", "string", "backward", "Compatibility level while none is configured (schema.compatibility.level).", one_of("none", "backward", "backward_transitive", "forward", "forward_transitive", "full", "full_transitive", "NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE")),
    ConfigKey("schema.registry.max.request.bytes", "int", 20971520, "Largest HTTP request body the registry reads; larger ones get 413.", at_least(1024)),
    ConfigKey("schema.registry.authentication.method", "string", "NONE", "BASIC: every request carries HTTP basic credentials of a SCRAM or PLAIN user of the broker.", one_of("NONE", "BASIC")),
    # Topics
    ConfigKey("auto.create.topics.enable", "boolean", True, "Create a topic on Metadata/Produce for an unknown name."),
    ConfigKey("delete.topic.enable", "boolean", True, "Allow DeleteTopics."),
    ConfigKey("num.partitions", "int", 1, "Partitions of an auto-created topic.", at_least(1)),
    ConfigKey("default.replication.factor", "int", 1, "Replication factor of an auto-created topic.", at_least(1)),
    ConfigKey("min.insync.replicas", "int", 1, "Minimum ISR size for acks=all.", at_least(1), topic_key="min.insync.replicas"),
    ConfigKey("unclean.leader.election.enable", "boolean", False, "Allow an out-of-sync replica to become leader.", topic_key="unclean.leader.election.enable"),
    ConfigKey("message.max.bytes", "int", 1048588, "Largest record batch accepted.", at_least(0), topic_key="max.message.bytes"),
    ConfigKey("compression.type", "string", "producer", "Final compression of a topic's data; only 'producer' (keep what the producer sent) is implemented.", one_of("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"), topic_key="compression.type"),
    ConfigKey("fetch.max.bytes", "int", 57671680, "Largest fetch response the broker builds.", at_least(1024)),
    ConfigKey("max.incremental.fetch.session.cache.slots", "int", 1000, "Incremental fetch sessions (KIP-227) the broker keeps; 0 serves every fetch sessionless.", at_least(0)),
    ConfigKey("min.incremental.fetch.session.eviction.ms", "int", 120000, "Idle time after which a fetch session may lose its slot to a new one (KIP-227's name; Apache Kafka fixes it at 120000).", at_least(0)),
    # Log
    ConfigKey("log.dir", "string", "/tmp/kafka-logs", "Data directory, used when log.dirs is unset."),
    ConfigKey("log.dirs", "list", None, "Data directories; each partition lives in one of them."),
    ConfigKey("log.segment.bytes", "int", 1073741824, "Size at which a segment is rolled.", at_least(14), topic_key="segment.bytes"),
    ConfigKey("log.roll.ms", "long", None, "Time after which a segment is rolled; overrides log.roll.hours.", topic_key="segment.ms"),
    ConfigKey("log.roll.hours", "int", 168, "Time after which a segment is rolled.", at_least(1)),
    ConfigKey("log.retention.ms", "long", None, "Retention time; overrides minutes and hours; -1 = unlimited.", topic_key="retention.ms"),
    ConfigKey("log.retention.minutes", "int", None, "Retention time; overrides hours."),
    ConfigKey("log.retention.hours", "int", 168, "Retention time."),
    ConfigKey("log.retention.bytes", "long", -1, "Retained bytes per partition; -1 = unlimited.", topic_key="retention.bytes"),
    ConfigKey("log.retention.check.interval.ms", "long", 300000, "How often retention runs.", at_least(1)),
    ConfigKey("log.index.interval.bytes", "int", 4096, "Bytes between offset-index entries.", at_least(0), topic_key="index.interval.bytes"),
    ConfigKey("log.index.size.max.bytes", "int", 10485760, "Preallocated size of an index file.", at_least(4), topic_key="segment.index.bytes"),
    ConfigKey("log.flush.interval.messages", "long", LONG_MAX, "Messages appended before a forced fsync.", at_least(1), topic_key="flush.messages"),
    ConfigKey("log.flush.interval.ms", "long", None, "Time before a forced fsync; defaults to log.flush.scheduler.interval.ms.", topic_key="flush.ms"),
    ConfigKey("log.flush.scheduler.interval.ms", "long", LONG_MAX, "How often the flusher checks whether a log needs an fsync."),
    ConfigKey("log.flush.offset.checkpoint.interval.ms", "int", 60000, "How often recovery points are checkpointed.", at_least(0)),
    ConfigKey("num.recovery.threads.per.data.dir", "int", 2, "Threads per log dir that flush and close the logs at a clean shutdown (10,000 partitions: 20,000 fsyncs, which threads let the file system batch).", at_least(1)),
    ConfigKey("log.flush.start.offset.checkpoint.interval.ms", "int", 60000, "How often log start offsets are checkpointed.", at_least(0)),
    ConfigKey("log.message.timestamp.type", "string", "CreateTime", "CreateTime or LogAppendTime.", one_of("CreateTime", "LogAppendTime"), topic_key="message.timestamp.type"),
    ConfigKey("log.message.timestamp.before.max.ms", "long", LONG_MAX, "How far a CreateTime record's timestamp may lie before the broker's clock.", at_least(0), topic_key="message.timestamp.before.max.ms"),
    ConfigKey("log.message.timestamp.after.max.ms", "long", LONG_MAX, "How far a CreateTime record's timestamp may lie after the broker's clock.", at_least(0), topic_key="message.timestamp.after.max.ms"),
    ConfigKey("log.message.timestamp.difference.max.ms", "long", LONG_MAX, "Deprecated: the before/after bound where those keep their default.", at_least(0), topic_key="message.timestamp.difference.max.ms"),
    ConfigKey("log.cleanup.policy", "list", ["delete"], "delete and/or compact.", one_of("delete", "compact"), topic_key="cleanup.policy"),
    ConfigKey("log.segment.delete.delay.ms", "long", 60000, "Delay before a deleted segment's files are removed.", at_least(0), topic_key="file.delete.delay.ms"),
    ConfigKey("log.preallocate", "boolean", False, "Preallocate segment files.", topic_key="preallocate"),
    ConfigKey("log.cleaner.enable", "boolean", True, "Run the log cleaner, which compacts topics whose cleanup.policy contains compact."),
    ConfigKey("log.cleaner.backoff.ms", "long", 15000, "Pause between two log cleaner passes.", at_least(0)),
    ConfigKey("log.cleaner.threads", "int", 1, "Logs cleaned at the same time, each in a worker thread.", at_least(0)),
    ConfigKey("log.cleaner.dedupe.buffer.size", "long", 134217728, "Memory budget of the key -> offset maps of all cleaner threads.", at_least(0)),
    ConfigKey("log.cleaner.min.cleanable.ratio", "double", 0.5, "Dirty bytes / total bytes above which a log is cleaned.", between(0, 1), topic_key="min.cleanable.dirty.ratio"),
    ConfigKey("log.cleaner.delete.retention.ms", "long", 86400000, "How long tombstones stay in a compacted log after the cleaner first saw them.", at_least(0), topic_key="delete.retention.ms"),
    ConfigKey("log.cleaner.min.compaction.lag.ms", "long", 0, "Minimum age of a record before it may be compacted.", at_least(0), topic_key="min.compaction.lag.ms"),
    ConfigKey("log.cleaner.max.compaction.lag.ms", "long", LONG_MAX, "Maximum age of an uncompacted record before its log is cleaned regardless of the ratio.", at_least(1), topic_key="max.compaction.lag.ms"),
    # Group coordinator and internal topics
    ConfigKey("offsets.topic.num.partitions", "int", 50, "Partitions of __consumer_offsets.", at_least(1)),
    ConfigKey("offsets.topic.replication.factor", "int", 3, "Replication factor of __consumer_offsets (capped at the live brokers).", at_least(1)),
    ConfigKey("offsets.retention.minutes", "int", 10080, "Committed offsets of an empty group expire after this.", at_least(1)),
    ConfigKey("group.initial.rebalance.delay.ms", "int", 3000, "Delay of the first rebalance of an empty group."),
    ConfigKey("offsets.topic.segment.bytes", "int", 104857600, "Segment size of __consumer_offsets.", at_least(1)),
    ConfigKey("offsets.retention.check.interval.ms", "long", 600000, "How often expired offsets are removed.", at_least(1)),
    ConfigKey("offsets.commit.timeout.ms", "int", 5000, "How long an offset commit waits for the ISR of its __consumer_offsets partition.", at_least(1)),
    ConfigKey("offset.metadata.max.bytes", "int", 4096, "Largest metadata string an offset commit may carry.", at_least(0)),
    ConfigKey("group.min.session.timeout.ms", "int", 6000, "Smallest session timeout a member may ask for.", at_least(0)),
    ConfigKey("group.max.session.timeout.ms", "int", 1800000, "Largest session timeout a member may ask for.", at_least(0)),
    ConfigKey("group.max.size", "int", 2**31 - 1, "Most members a consumer group may have.", at_least(1)),
    ConfigKey("group.coordinator.rebalance.protocols", "list", ["classic", "consumer"], "Group protocols served: classic (JoinGroup/SyncGroup) and consumer (KIP-848's ConsumerGroupHeartbeat).", one_of("classic", "consumer")),
    ConfigKey("group.consumer.heartbeat.interval.ms", "int", 5000, "Heartbeat interval given to consumer-protocol members.", at_least(1)),
    ConfigKey("group.consumer.session.timeout.ms", "int", 45000, "A consumer-protocol member without a heartbeat for this long is removed.", at_least(1)),
    ConfigKey("group.consumer.migration.policy", "string", "bidirectional", "Online migration between the group protocols: upgrade (a consumer-protocol member converts a classic group), downgrade (the last one leaving converts it back), bidirectional or disabled.", one_of("disabled", "downgrade", "upgrade", "bidirectional")),
    ConfigKey("group.consumer.assignors", "list", ["uniform", "range"], "Server-side assignors of consumer-protocol groups, the first the default (Kafka's class names are accepted too).", one_of("uniform", "range", "org.apache.kafka.coordinator.group.assignor.UniformAssignor", "org.apache.kafka.coordinator.group.assignor.RangeAssignor")),
    ConfigKey("group.share.session.timeout.ms", "int", 45000, "A share group member without a heartbeat for this long is removed and its acquired records released.", at_least(1)),
    ConfigKey("group.share.min.session.timeout.ms", "int", 45000, "The least share.session.timeout.ms a share group may set.", at_least(1)),
    ConfigKey("group.share.max.session.timeout.ms", "int", 60000, "The most share.session.timeout.ms a share group may set.", at_least(1)),
    ConfigKey("group.share.heartbeat.interval.ms", "int", 5000, "Heartbeat interval given to share group members.", at_least(1)),
    ConfigKey("group.share.min.heartbeat.interval.ms", "int", 5000, "The least share.heartbeat.interval.ms a share group may set.", at_least(1)),
    ConfigKey("group.share.max.heartbeat.interval.ms", "int", 15000, "The most share.heartbeat.interval.ms a share group may set.", at_least(1)),
    ConfigKey("group.share.record.lock.duration.ms", "int", 30000, "How long a share group member holds the records it acquired before they are released for redelivery.", between(1000, 3600000)),
    ConfigKey("group.share.min.record.lock.duration.ms", "int", 15000, "The least share.record.lock.duration.ms a share group may set.", between(1000, 30000)),
    ConfigKey("group.share.max.record.lock.duration.ms", "int", 60000, "The most share.record.lock.duration.ms a share group may set.", between(30000, 3600000)),
    ConfigKey("group.share.delivery.count.limit", "int", 5, "Delivery attempts of a record to a share group before it is archived.", between(2, 10)),
    ConfigKey("group.share.partition.max.record.locks", "int", 2000, "Records of one share-partition in flight (acquired or waiting for redelivery) at most.", between(100, 10000)),
    ConfigKey("group.share.max.size", "int", 200, "Members of one share group at most.", between(10, 1000)),
    ConfigKey("group.share.initialize.retry.interval.ms", "int", 30000, "How long the group coordinator waits for a share-partition's state initialization it asked for before asking again (at least offsets.commit.timeout.ms).", at_least(1)),
    ConfigKey("group.share.max.share.sessions", "int", 2000, "Share sessions (share consumers fetching) this broker holds at most.", at_least(1)),
    ConfigKey("share.coordinator.state.topic.num.partitions", "int", 50, "Partitions of __share_group_state, the share coordinator's internal topic.", at_least(1)),
    ConfigKey("share.coordinator.state.topic.replication.factor", "int", 3, "Replication factor of __share_group_state (capped at the live brokers when it is created).", at_least(1)),
    ConfigKey("share.coordinator.state.topic.min.isr", "int", 2, "min.insync.replicas of __share_group_state.", at_least(1)),
    ConfigKey("share.coordinator.state.topic.segment.bytes", "int", 104857600, "Segment size of __share_group_state.", at_least(1)),
    ConfigKey("share.coordinator.snapshot.update.records.per.snapshot", "int", 500, "ShareUpdate records of a share-partition written before its whole state is written again as a ShareSnapshot.", between(0, 500)),
    ConfigKey("share.coordinator.cold.partition.snapshot.interval.ms", "int", 300000, "How old a share-partition's last ShareSnapshot may get before the share coordinator writes its state again as a new one (so that pruning can pass it).", at_least(1)),
    ConfigKey("share.coordinator.state.topic.prune.interval.ms", "int", 300000, "How often the share coordinator deletes the records of __share_group_state that later snapshots made redundant.", at_least(1)),
    ConfigKey("share.coordinator.write.timeout.ms", "int", 5000, "How long the share coordinator waits for the in-sync replicas of a __share_group_state write.", at_least(1)),
    ConfigKey("request.timeout.ms", "int", 30000, "How long the transaction coordinator waits for the ISR of its writes and for other brokers' answers to WriteTxnMarkers.", at_least(1)),
    ConfigKey("transaction.state.log.num.partitions", "int", 50, "Partitions of __transaction_state.", at_least(1)),
    ConfigKey("transaction.state.log.replication.factor", "int", 3, "Replication factor of __transaction_state.", at_least(1)),
    ConfigKey("transaction.state.log.min.isr", "int", 2, "min.insync.replicas of __transaction_state.", at_least(1)),
    ConfigKey("producer.id.expiration.ms", "int", 86400000, "Idle producer ids are forgotten after this.", at_least(1)),
    ConfigKey("producer.id.expiration.check.interval.ms", "int", 600000, "How often idle producer ids are looked for.", at_least(1)),
    ConfigKey("transaction.state.log.segment.bytes", "int", 104857600, "Segment size of __transaction_state.", at_least(1)),
    ConfigKey("transaction.max.timeout.ms", "int", 900000, "Largest transaction timeout a producer may ask for.", at_least(1)),
    ConfigKey("transactional.id.expiration.ms", "int", 604800000, "A transactional id unused for this long is forgotten.", at_least(1)),
    ConfigKey("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000, "How often transactions past their timeout are aborted.", at_least(1)),
    ConfigKey("transaction.partition.verification.enable", "boolean", True, "Refuse transactional batches and offset commits for partitions not added to an ongoing transaction."),
    ConfigKey("transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3600000, "How often expired transactional ids are removed.", at_least(1)),
]

CONFIG_KEYS: dict[str, ConfigKey] = {key.name: key for key in _KEYS}

#: The keys Kafka can change at runtime (its DynamicBrokerConfig.AllDynamicConfigs), restricted to the
#: keys declared here: every broker key that provides a topic config's default (DynamicLogConfig), the
#: log cleaner's, the thread pools', the listeners' and the producer-state ones. DescribeConfigs reports
#: every other broker key as read-only, as Kafka does.
DYNAMIC_KEYS: frozenset[str] = frozenset(
    {key.name for key in _KEYS if key.topic_key}
    | {"log.cleaner.threads", "log.cleaner.dedupe.buffer.size", "log.cleaner.backoff.ms", "num.io.threads",
       "listeners", "num.network.threads", "producer.id.expiration.ms", "transaction.partition.verification.enable"})

#: Keys that set the same value in another unit, in Kafka's order of precedence (DynamicBrokerConfig.brokerConfigSynonyms).
_SYNONYM_GROUPS = (("log.roll.ms", "log.roll.hours"),
                   ("log.retention.ms", "log.retention.minutes", "log.retention.hours"))


def key_synonyms(name: str) -> tuple[str, ...]:
    """`name` and the keys that set the same value, most specific first."""
    if name == "log.flush.interval.ms":  # its default is log.flush.scheduler.interval.ms
        return name, "log.flush.scheduler.interval.ms"
    return next((group for group in _SYNONYM_GROUPS if name in group), (name,))


def value_text(value: Any) -> str | None:
    """A parsed value as Kafka's ConfigDef.convertToString writes it."""
    if isinstance(value, list):
        return ",".join(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return None if value is None else str(value)

_LINE_CONTINUATION = re.compile(r"(?<!\\)(\\\\)*\\$")


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java `.properties` text: `key=value` or `key: value`, `#`/`!` comments, `\\` continuations."""
    result: dict[str, str] = {}
    pending = ""
    for raw_line in text.splitlines():
        line = raw_line.strip() if not pending else raw_line.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        if _LINE_CONTINUATION.search(line):
            pending += line[:-1]
            continue
        line = pending + line
        pending = ""
        match = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
        if match:
            result[match.group(1)] = match.group(2)
        else:
            result[line] = ""
    return result


class BrokerConfig:
    """Typed broker configuration with Kafka's precedence rules for derived values."""

    def __init__(self, values: Mapping[str, str]):
        self.raw: dict[str, str] = dict(values)
        self.unknown: list[str] = sorted(k for k in values if k not in CONFIG_KEYS and not _is_listener_override(k))
        self._values: dict[str, Any] = {}
        for key in _KEYS:
            value = key.default if key.name not in values else _parse(key, values[key.name])
            if key.validator is not None:
                key.validator(key.name, value)
            self._values[key.name] = value
        self._check_listeners()

    @classmethod
    def load(cls, path: str | None, overrides: Iterable[str] = (),
             base: Mapping[str, str] | None = None) -> "BrokerConfig":
        """The file at ``path`` (or ``base``'s values without one), then ``overrides`` (``key=value``)."""
        values: dict[str, str] = dict(base or {})
        if path is not None:
            try:
                with open(path, encoding="utf-8") as handle:
                    values.update(parse_properties(handle.read()))
            except OSError as exc:
                raise ConfigError(f"Cannot read config file {path}: {exc.strerror}") from None
        for item in overrides:
            if "=" not in item:
                raise ConfigError(f"Invalid override {item!r}: expected key=value")
            key, value = item.split("=", 1)
            values[key.strip()] = value
        return cls(values)

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def is_set(self, name: str) -> bool:
        return name in self.raw

    # Derived values, with Kafka's precedence rules.

    @property
    def log_dirs(self) -> list[str]:
        return self["log.dirs"] or [self["log.dir"]]

    @property
    def retention_ms(self) -> int:
        """As Kafka's KafkaConfig.logRetentionTimeMillis: any negative retention is -1, unlimited."""
        if self["log.retention.ms"] is not None:
            millis = self["log.retention.ms"]
        elif self["log.retention.minutes"] is not None:
            millis = self["log.retention.minutes"] * 60_000
        else:
            millis = self["log.retention.hours"] * 3_600_000
        return -1 if millis < 0 else millis

    @property
    def roll_ms(self) -> int:
        return self["log.roll.ms"] if self["log.roll.ms"] is not None else self["log.roll.hours"] * 3_600_000

    @property
    def flush_ms(self) -> int:
        value = self["log.flush.interval.ms"]
        return value if value is not None else self["log.flush.scheduler.interval.ms"]

    @property
    def listeners(self) -> list[tuple[str, str, int]]:
        return [parse_listener(uri) for uri in self["listeners"]]

    def topic_defaults(self) -> dict[str, str]:
        """Broker-level defaults of topic configs, as the strings a topic override would carry."""
        defaults: dict[str, str] = {}
        derived = {"segment.ms": self.roll_ms, "retention.ms": self.retention_ms, "flush.ms": self.flush_ms}
        for key in _KEYS:
            if key.topic_key is None:
                continue
            defaults[key.topic_key] = str(value_text(derived.get(key.topic_key, self[key.name])))
        return defaults

    def _check_listeners(self) -> None:
        for name in ("listeners", "advertised.listeners"):
            for uri in self[name] or []:
                try:
                    parse_listener(uri)
                except ValueError as exc:
                    raise ConfigError(f"Invalid value {uri} for configuration {name}: {exc}") from None
        self.listener_set: Listeners = listeners_from_config(self)


LISTENER_PREFIX = "listener.name."


def _is_listener_override(name: str) -> bool:
    """``listener.name.<listener>.<key>`` with a declared key (the SASL keys carry a mechanism too)."""
    if not name.startswith(LISTENER_PREFIX):
        return False
    rest = name[len(LISTENER_PREFIX):].partition(".")[2]
    return rest in CONFIG_KEYS or ".sasl." in f".{rest}" or rest.startswith("sasl.")
