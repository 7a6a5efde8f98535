"""Share-partitions (KIP-932) on the partition leader: which records of a partition a share group has in flight,
acquired by whom and until when, and which are done."""
