"""The sample configurations, shipped in the wheel: `pybroker sample-config [NAME]` prints them.

In the repository each file here is a link to its copy in ``config/`` (Kafka's layout, where the Makefile,
the Dockerfile and the docs name them); the wheel carries their contents.
"""

from __future__ import annotations

from importlib import resources

SUFFIX = ".properties"


def sample_names() -> list[str]:
    """The samples' names, without the .properties suffix (``server``, ``ssl``, ...)."""
    return sorted(entry.name[:-len(SUFFIX)] for entry in resources.files(__name__).iterdir()
                  if entry.name.endswith(SUFFIX))


def sample_text(name: str) -> str:
    """The sample's text; KeyError naming the samples there are for an unknown name."""
    if name not in sample_names():
        raise KeyError(f"no sample configuration named {name!r} (there are: {', '.join(sample_names())})")
    return (resources.files(__name__) / f"{name}{SUFFIX}").read_text(encoding="utf-8")
