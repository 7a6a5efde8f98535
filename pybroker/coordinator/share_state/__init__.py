"""The share coordinator (KIP-932): share-partitions' durable delivery state in ``__share_group_state``."""
