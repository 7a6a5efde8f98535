"""PySpark Structured Streaming jobs over pybroker topics (the Spark issue); they never import pybroker."""
