"""The election types of ElectLeaders (KIP-460), which the controller runs and ``pybroker leader-election`` names."""

from __future__ import annotations

from enum import IntEnum

__all__ = ["ElectionType"]


class ElectionType(IntEnum):
    """ElectLeaders' election types (KIP-460)."""

    PREFERRED = 0
    UNCLEAN = 1
