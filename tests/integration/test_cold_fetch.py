"""A Fetch from a log the page cache does not hold: the header walk never waits for the disk on the
event loop (the range is read into the cache on an I/O thread first, then the walk starts over),
and the consumer gets every record in order."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.broker_process import BrokerProcess
from tests.integration.test_confluent_kafka import consume_all
from tests.integration.test_metrics import METRICS_URL, scrape
from tests.integration.test_zero_copy import evict_from_page_cache

TOPIC = "cold"
COUNT = 4000


def test_a_consumer_of_a_cold_log_reads_it_all_through_the_io_threads(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path, {"metrics.port": "0"}).start()
    try:
        url = METRICS_URL.search(broker.log_text()).group(1)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1, config={"segment.bytes": str(1 << 20)})])[TOPIC].result(30)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.num.messages": 20})
        for i in range(COUNT):
            producer.produce(TOPIC, value=b"%06d" % i * 170, partition=0)
        assert producer.flush(30) == 0
        segments = sorted(Path(broker.data_dir, "logs", f"{TOPIC}-0").glob("*.log"))
        assert len(segments) >= 3
        before = scrape(url)[("pybroker_io_cold_reads_total", (("path", "fetch"),))]
        for segment in segments:
            evict_from_page_cache(segment)
        received = consume_all(broker.bootstrap, TOPIC, COUNT, partitions=1)
        assert [r.offset for r in received] == list(range(COUNT))
        assert [r.value for r in received] == [b"%06d" % i * 170 for i in range(COUNT)]
        assert scrape(url)[("pybroker_io_cold_reads_total", (("path", "fetch"),))] > before
    finally:
        broker.kill()
