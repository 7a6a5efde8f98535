"""Moved to :mod:`pybroker.zk.client`, below both the controller and the command-line tools (Kafka's ``kafka.zk``);
the controller's and the server's modules still import it from here."""

from pybroker.zk.client import *  # noqa: F401,F403
