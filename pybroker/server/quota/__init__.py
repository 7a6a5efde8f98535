"""Client quotas as Kafka enforces them: byte rates, request time and controller mutations per
user, client id or (user, client id), measured over sample windows and answered with a throttle
time and a muted connection (KIP-219)."""
