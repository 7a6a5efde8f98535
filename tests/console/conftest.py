"""A real broker, consoles started as `pybroker console` processes, and Debian's chromium driven by Playwright."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, Iterator

import pytest

from tests.integration.broker_process import REPO, BrokerProcess

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = Path(__file__).resolve().parent / "screenshots"
STARTUP_S = 30.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ConsoleProcess:
    def __init__(self, args: list[str], log: Path) -> None:
        """``log`` takes the console's output: a pipe nobody reads would stall the console once it filled."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        with log.open("w") as output:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "pybroker", "console", "--port", str(self.port), *args],
                cwd=REPO, stdout=output, stderr=subprocess.STDOUT, text=True)

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def wait_ready(self) -> "ConsoleProcess":
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"console exited: {self.log_tail()}")
            try:
                urllib.request.urlopen(f"{self.url}/login", timeout=5).close()
                return self
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.1)
        raise RuntimeError("console did not start")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture(scope="session")
def screenshots() -> Path:
    shutil.rmtree(SCREENSHOTS, ignore_errors=True)
    SCREENSHOTS.mkdir(parents=True)
    print(f"\nconsole screenshots in {SCREENSHOTS}")
    return SCREENSHOTS


@pytest.fixture(scope="module")
def console_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """With an authorizer, so the ACL page has ACLs to show; the console connects as the super user ANONYMOUS."""
    process = BrokerProcess(tmp_path_factory.mktemp("console-broker"), {
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:ANONYMOUS"}).start()
    yield process
    process.kill()


@pytest.fixture(scope="module")
def start_console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., ConsoleProcess]]:
    started: list[ConsoleProcess] = []
    logs = tmp_path_factory.mktemp("console-logs")

    def start(*args: str) -> ConsoleProcess:
        console = ConsoleProcess(list(args), logs / f"console-{len(started)}.log")
        started.append(console)
        return console

    yield start
    for console in started:
        console.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed (tools/install-system-deps.sh installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                             args=["--no-sandbox", "--disable-dev-shm-usage"])
        yield browser
        browser.close()


@pytest.fixture
def page(browser):  # type: ignore[no-untyped-def]
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    yield page
    context.close()
