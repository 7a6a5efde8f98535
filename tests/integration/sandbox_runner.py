"""Runs a plan of shell steps inside private network and mount namespaces (see sandbox.py), as a user at a terminal
would: its own loopback, so servers bind their default ports (127.0.0.1:9092) without meeting anything else on
the machine, and private empty directories over the fixed paths the samples write to (/tmp/kafka-logs, ...).

Standard library only: it runs under whichever interpreter the test picks (the wheel's venv too).
    python sandbox_runner.py PLAN.json   ->  one JSON object on stdout: the steps' outcomes

A step is ``{"name", "kind": "run"|"server", "script", "ports": [...], "timeout"}``. A run step is a bash script
(``set -eo pipefail``) that must exit 0 within its timeout. A server step starts its script in the background and
waits until every listed port accepts connections. The plan stops at the first failed step; whatever the steps
left running (servers, `cmd &`) is stopped when it ends, each step's process group with SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

OUTPUT_KEPT = 20000
LINES_KEPT = 2000


def setup(plan: dict) -> None:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    for directory in plan.get("private_dirs", []):
        os.makedirs(directory, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512m", "tmpfs", directory], check=True)


def stop_group(process: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM to the step's whole process group (what it started in the background too), SIGKILL after ``grace``."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        deadline = time.monotonic() + wait
        try:
            os.killpg(process.pid, sig)
            while time.monotonic() < deadline:
                process.poll()  # reaps the leader, which stays in the group until then
                os.killpg(process.pid, 0)
                time.sleep(0.05)
        except ProcessLookupError:  # the group is gone
            return


class Output:
    """A child's combined output, read by a thread so the child never blocks on a full pipe."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.chunks: collections.deque[str] = collections.deque(maxlen=LINES_KEPT)
        self.thread = threading.Thread(target=self._pump, args=(process,), daemon=True)
        self.thread.start()

    def _pump(self, process: subprocess.Popen) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.chunks.append(line)

    def text(self) -> str:
        return "".join(self.chunks)[-OUTPUT_KEPT:]


def port_open(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def start(script: str, plan: dict) -> subprocess.Popen:
    return subprocess.Popen(["bash", "-c", "set -eo pipefail\n" + script], cwd=plan["work"], env=plan["env"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                            errors="replace", start_new_session=True)


def run_step(step: dict, plan: dict, servers: list[tuple[subprocess.Popen, Output]],
             background: list[subprocess.Popen]) -> dict:
    process = start(step["script"], plan)
    output = Output(process)
    timeout = step.get("timeout", 60)
    if step["kind"] == "server":
        servers.append((process, output))
        deadline = time.monotonic() + timeout
        while not all(port_open(port) for port in step.get("ports", [])):
            if process.poll() is not None and process.returncode != 0:
                return {"ok": False, "why": f"exited with {process.returncode}", "output": output.text()}
            if time.monotonic() > deadline:
                return {"ok": False, "why": f"ports {step['ports']} not open after {timeout} s", "output": output.text()}
            time.sleep(0.05)
        return {"ok": True, "output": output.text()}
    background.append(process)  # what it leaves running in the background is stopped when the plan ends
    try:
        code = process.wait(timeout)
    except subprocess.TimeoutExpired:
        stop_group(process, grace=2.0)
        output.thread.join(5)
        return {"ok": False, "why": f"no exit within {timeout} s", "output": output.text()}
    output.thread.join(1)  # a background process holding the pipe keeps it open: take what is there
    return {"ok": code == 0, "why": f"exit code {code}", "output": output.text()}


def main() -> int:
    with open(sys.argv[1], encoding="utf-8") as handle:
        plan = json.load(handle)
    setup(plan)
    servers: list[tuple[subprocess.Popen, Output]] = []
    background: list[subprocess.Popen] = []
    results = []
    try:
        for step in plan["steps"]:
            result = {"name": step["name"], **run_step(step, plan, servers, background)}
            results.append(result)
            if not result["ok"]:
                break
    finally:
        for process in reversed(background):
            stop_group(process)
        for process, _ in reversed(servers):
            stop_group(process)
        for result, (_, output) in zip([r for r, s in zip(results, plan["steps"]) if s["kind"] == "server"], servers):
            result["output"] = output.text()
    print(json.dumps({"steps": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
