"""Fault-injection harness with a history checker (`make chaos`), after Jepsen's Kafka and Redpanda
analyses: a ZooKeeper + broker cluster on loopback, seeded faults, a recorded workload, a checker."""
