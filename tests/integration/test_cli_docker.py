"""The container image without a Docker engine: replay the Dockerfile's install and commands.

The test reads the Dockerfile itself: it copies exactly the paths its COPY lines name into a build
directory, installs that directory with `pip install` (not editable, the wheel built in an isolated
build environment) into a fresh venv as the image's `RUN pip install --no-cache-dir .` does, then
starts the broker with the image's CMD and probes it with its HEALTHCHECK command, both run from the
venv's `pybroker` script.

To stay fast and offline beyond PyPI, the venv is created without pip (the project's pip installs
into it with `--python`) and with `--no-deps`: the dependencies come from the test venv through a
`.pth` line, the same packages the image would fetch from PyPI. The project itself is the venv's
own non-editable copy, which the test checks. Only the listener and data directory differ from the
image's server.properties: the image binds 0.0.0.0:9092, the test an ephemeral loopback port.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
from pathlib import Path

from tests.integration.broker_process import READY, REPO

DOCKERFILE = REPO / "Dockerfile"


def instruction(name: str) -> list[str]:
    """Every argument text of one Dockerfile instruction, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    return [line.split(None, 1)[1].strip() for line in text.splitlines() if line.split(None, 1)[:1] == [name]]


def test_image_settings() -> None:
    assert instruction("FROM")[0].startswith("python:3.11-slim")
    assert instruction("EXPOSE") == ["9092"]
    assert instruction("USER") and instruction("USER")[0] not in ("root", "0")
    assert json.loads(instruction("VOLUME")[0]) == ["/var/lib/pybroker"]
    assert json.loads(instruction("CMD")[0]) == ["pybroker", "serve", "/etc/pybroker/server.properties"]
    assert "pybroker broker-api-versions" in " ".join(json.loads(instruction("HEALTHCHECK")[0].split("CMD", 1)[1]))


def test_installed_like_the_image_the_broker_serves_and_is_healthy(tmp_path: Path) -> None:
    context = tmp_path / "context"
    context.mkdir()
    for copy in instruction("COPY"):
        *sources, _ = copy.split()
        for source in sources:
            origin = REPO / source
            target = context / source
            if origin.is_dir():
                shutil.copytree(origin, target, ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyd"))
            else:
                shutil.copy(origin, target)
    assert any("pip install --no-cache-dir ." in run for run in instruction("RUN"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                    str(context)], check=True, timeout=300, capture_output=True)
    site_packages = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                        check=True, capture_output=True, text=True).stdout.strip())
    (site_packages / "test-dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    located = subprocess.run([str(python), "-c", "import pybroker; print(pybroker.__file__)"], check=True,
                             capture_output=True, text=True, cwd=tmp_path,
                             env={**os.environ, "PYTHONPATH": ""}).stdout.strip()
    assert located.startswith(str(site_packages))

    config = tmp_path / "server.properties"
    config.write_text((REPO / "config" / "server.properties").read_text()
                      .replace("listeners=PLAINTEXT://127.0.0.1:9092", "listeners=PLAINTEXT://127.0.0.1:0")
                      .replace("log.dirs=/tmp/kafka-logs", f"log.dirs={tmp_path / 'data'}")
                      .replace("schema.registry.listeners=http://127.0.0.1:8081", "schema.registry.listeners=http://127.0.0.1:0"))
    command = json.loads(instruction("CMD")[0])
    command[command.index("/etc/pybroker/server.properties")] = str(config)
    env = {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "PYTHONPATH": ""}
    broker = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=tmp_path,
                              env=env)
    try:
        log: list[str] = []
        found = threading.Event()

        def pump() -> None:
            assert broker.stderr is not None
            for line in broker.stderr:
                log.append(line)
                if READY.search(line):
                    found.set()
            found.set()

        threading.Thread(target=pump, daemon=True).start()
        assert found.wait(60), log
        match = next((READY.search(line) for line in log if READY.search(line)), None)
        assert match, log
        port = match.group(1)  # the image's listener is 9092; here an ephemeral port
        health = json.loads(instruction("HEALTHCHECK")[0].split("CMD", 1)[1])
        health[health.index("localhost:9092")] = f"127.0.0.1:{port}"
        probe = subprocess.run(health, capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)
        assert probe.returncode == 0, probe
        assert probe.stdout.startswith(f"127.0.0.1:{port} (id: 0 rack: null) -> (")
    finally:
        broker.send_signal(signal.SIGTERM)
        assert broker.wait(30) == 0
