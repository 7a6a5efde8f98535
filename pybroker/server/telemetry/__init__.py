"""Client telemetry (KIP-714): subscriptions, the pushes clients make, and their metrics on /metrics."""
