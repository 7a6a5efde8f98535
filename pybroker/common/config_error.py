"""The one error of every configuration check, apart from the key table (config.py) so that the modules that
check one kind of value, and that config.py runs (listeners.py), raise it without importing the table back."""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names the key."""
