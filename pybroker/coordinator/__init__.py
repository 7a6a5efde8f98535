"""Group coordinator: classic consumer groups and committed offsets, persisted in __consumer_offsets."""
