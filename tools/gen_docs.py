"""Write the generated parts of docs/: the configuration reference from pybroker/common/config.py and
pybroker/log/config.py, and the table of API versions the broker serves from its handlers.

Each generated part sits between ``<!-- BEGIN GENERATED name -->`` and ``<!-- END GENERATED name -->`` lines in a
page; the text around it is written by hand. ``--check`` writes nothing and exits 1 when a part is out of date
(tests/unit/test_docs_generated.py runs it). The client compatibility matrix is generated the same way, by the test
that runs the clients (tests/integration/test_compatibility.py).

    python tools/gen_docs.py [--check]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"


def block_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- BEGIN GENERATED {re.escape(name)}[^>]*-->\n)(.*?)(<!-- END GENERATED {re.escape(name)} -->)",
                      re.S)


def replace_block(text: str, name: str, content: str) -> str:
    """``text`` with the generated block ``name`` holding ``content``; ValueError if the page has no such block."""
    pattern = block_pattern(name)
    if not pattern.search(text):
        raise ValueError(f"no generated block {name!r}")
    return pattern.sub(lambda match: match.group(1) + content + match.group(3), text, count=1)


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _valid(validator: Any) -> str:
    from pybroker.common.config import AtLeast, Between, OneOf

    if isinstance(validator, AtLeast):
        return f"≥ {validator.minimum}"
    if isinstance(validator, Between):
        return f"{validator.minimum} … {validator.maximum}"
    if isinstance(validator, OneOf):
        return ", ".join(validator.choices)
    return ""


def _default(value: Any) -> str:
    from pybroker.common.config import LONG_MAX, value_text

    if value == LONG_MAX and not isinstance(value, bool):
        return "`9223372036854775807` (Long.MAX_VALUE)"
    shown = value_text(value)
    return "(none)" if shown is None else f"`{shown}`" if shown else '`""`'


def broker_keys() -> str:
    from pybroker.common.config import CONFIG_KEYS, DYNAMIC_KEYS

    lines = ["| key | type | default | valid values | description |", "|---|---|---|---|---|"]
    for key in CONFIG_KEYS.values():
        note = f" Default of the topic key `{key.topic_key}`." if key.topic_key else ""
        if key.name in DYNAMIC_KEYS:
            note += " Dynamic in Kafka; static in pybroker (set it in the file and restart)."
        lines.append(f"| `{key.name}` | {key.type} | {_default(key.default)} | {_cell(_valid(key.validator))} | "
                     f"{_cell(key.doc)}{note} |")
    return "\n".join(lines) + "\n"


def topic_keys() -> str:
    from pybroker.log.config import TOPIC_CONFIG_KEYS
    from pybroker.server.topic_configs import topic_keys as declared

    lines = ["| key | type | default from broker key | valid values | description |", "|---|---|---|---|---|"]
    for key in declared():
        source = f"`{key.broker_key.name}`" if key.broker_key is not None else \
            f"— ({_default(TOPIC_CONFIG_KEYS[key.name].default)})"
        lines.append(f"| `{key.name}` | {key.type} | {source} | {_cell(_valid(key.validator))} | {_cell(key.doc)} |")
    return "\n".join(lines) + "\n"


def served_apis() -> str:
    from pybroker.server.dispatcher import CONSUMER_PROTOCOL_APIS
    from pybroker.server.handlers import ALL_HANDLERS
    from pybroker.server.inter_broker_guard import GUARDED
    from pybroker.server.metrics import request_name

    lines = ["| API (key) | versions served | note |", "|---|---|---|"]
    for handler in sorted(ALL_HANDLERS, key=lambda h: h.api_key):
        note = "sent by brokers only" if handler.api_key in GUARDED else \
            "while `group.coordinator.rebalance.protocols` lists `consumer`" \
            if handler.api_key in CONSUMER_PROTOCOL_APIS else ""
        lines.append(f"| {request_name(handler.api_key)} ({handler.api_key}) | "
                     f"{handler.min_version}–{handler.max_version} | {note} |")
    return "\n".join(lines) + "\n"


#: page -> generated block -> what writes it
BLOCKS: dict[str, dict[str, Callable[[], str]]] = {
    "configuration.md": {"broker-keys": broker_keys, "topic-keys": topic_keys},
    "compatibility.md": {"served-apis": served_apis},
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is out of date")
    args = parser.parse_args(argv)
    stale = []
    for page, blocks in BLOCKS.items():
        path = DOCS / page
        text = path.read_text(encoding="utf-8")
        updated = text
        for name, render in blocks.items():
            updated = replace_block(updated, name, render())
        if updated != text:
            stale.append(page)
            if not args.check:
                path.write_text(updated, encoding="utf-8")
    if args.check and stale:
        print(f"out of date: {', '.join(f'docs/{p}' for p in stale)} (run python tools/gen_docs.py)", file=sys.stderr)
        return 1
    print(f"{'checked' if args.check else 'wrote'} {len(BLOCKS)} pages" + (f"; updated {stale}" if stale else ""))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
