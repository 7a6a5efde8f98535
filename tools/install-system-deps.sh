#!/usr/bin/env bash
# Install the Debian packages the test suite uses, only when they are missing.
set -euo pipefail
missing=()
command -v kcat >/dev/null 2>&1 || missing+=(kcat)
# ZooKeeper for the cluster tests (tests/cluster/zookeeper.py starts it from these jars with java).
[ -f /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
# Java runs ZooKeeper and Spark 4 (tests/spark; Spark 4 needs Java 17 or 21, Debian's default JRE since 12).
command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)
# javac compiles the Java client scenarios (tests/java, run by tests/integration/test_java_client.py).
command -v javac >/dev/null 2>&1 || missing+=(default-jdk-headless)
# The docs' commands and the wheel's test run in private network and mount namespaces (tests/integration/sandbox.py):
# unshare from util-linux, ip from iproute2; the docs use curl.
command -v unshare >/dev/null 2>&1 || missing+=(util-linux)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v curl >/dev/null 2>&1 || missing+=(curl)
# Chromium runs the web console's browser tests (tests/console, driven by Playwright at /usr/bin/chromium).
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
# curl runs the README's schema registry commands (tests/integration/test_readme_schema_registry.py).
command -v curl >/dev/null 2>&1 || missing+=(curl)
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing Debian packages: ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq "${missing[@]}" >/dev/null
