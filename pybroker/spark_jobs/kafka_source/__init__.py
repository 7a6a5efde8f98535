"""A Python Data Source that stands in for Spark's Kafka connector when its JVM package is not on the classpath."""
