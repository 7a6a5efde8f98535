"""A broker reads Fetch and Produce requests and writes their answers with the typed codecs.

`schema.py` cannot import them (they import the message classes), so the broker's dispatcher puts them in
front of the plans when it is built; nothing else would notice if that stopped, but every small request
would cost the generic codec's instructions again. Checked in a fresh interpreter, where no test has put
them in front already."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import sys
from pybroker.common.config import BrokerConfig
from pybroker.protocol.messages import FetchRequest, FetchResponse, ProduceRequest, ProduceResponse
from pybroker.protocol.schema import get_plan
from pybroker.server.broker import Broker

before = type(get_plan(FetchRequest, 16).read).__name__
Broker(BrokerConfig({"log.dirs": sys.argv[1], "listeners": "PLAINTEXT://127.0.0.1:0"}))
print(before, type(get_plan(FetchRequest, 16).read).__name__, type(get_plan(ProduceRequest, 9).read).__name__,
      type(get_plan(FetchResponse, 16).write).__name__, type(get_plan(ProduceResponse, 9).write).__name__)
"""


def test_a_broker_puts_the_typed_codecs_in_front_of_the_hot_plans(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "logs")], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    before, *after = done.stdout.split()
    assert before == "function"  # a plan compiled before any broker exists is the generic one
    assert after == ["FetchRequestV16", "ProduceRequestV9", "FetchResponseV16", "ProduceResponseV9"]
