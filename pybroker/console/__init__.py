"""`pybroker console`: a web console for a Kafka cluster (pybroker or Apache Kafka), over the Kafka protocol only."""
