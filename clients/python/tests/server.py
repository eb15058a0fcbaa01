"""Starts the real taskhoster binary (TASKHOSTER_BIN) on a loopback port with a
hosts folder of its own, as tests/e2e/harness_test.go does for the Go tests."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import unittest
from pathlib import Path
from typing import Any

from taskhoster import Client

HOST = "task.example.com"
ALICE = "a11ce0000000000000000000000000a1"  # post and status on "resize"
BOX = "b0b0000000000000000000000000b0b0"  # work on "resize"
EVE = "e0e0000000000000000000000000e0e0"  # a user with no access at all

QUEUES: dict[str, Any] = {
    # The seeds' example schemas, with access for named users.
    "resize": {
        "item": {
            "type": "object",
            "required": ["url"],
            "properties": {"url": {"type": "string"}, "width": {"type": "integer", "minimum": 1}},
        },
        "progress": {"type": "object", "properties": {"percent": {"type": "number"}}},
        "result": {"type": "object"},
        "failure": {"type": "object"},
        "settings": {"leaseSeconds": 60, "maxItemBytes": 4096},
        "access": {"post": ["alice"], "status": ["alice"], "work": ["box"]},
    },
    # Everything public; a one-second lease, which only heartbeats outlive.
    "public": {
        "item": {},
        "settings": {"leaseSeconds": 1},
        "access": {"post": "public", "status": "public", "work": "public"},
    },
    # Reasons of give-backs must say why.
    "strict": {
        "item": {},
        "failure": {"type": "object", "required": ["why"]},
        "access": {"post": "public", "status": "public", "work": "public"},
    },
    # A dead letter after the second attempt.
    "twice": {
        "item": {},
        "settings": {"maxAttempts": 2},
        "access": {"post": "public", "status": "public", "work": "public"},
    },
}

USERS = {"alice": ALICE, "box": BOX, "eve": EVE}


def binary() -> str:
    path = os.environ.get("TASKHOSTER_BIN", "")
    if not path or not os.access(path, os.X_OK):
        raise RuntimeError(
            "TASKHOSTER_BIN must name the taskhoster binary (it is %r); `make test-python` builds it and sets it" % path
        )
    return path


def write_hosts(root: Path) -> Path:
    hosts = root / "hosts"
    for name, queue in QUEUES.items():
        _write(hosts / HOST / "taskhoster-queues" / f"{name}.json", queue)
    for name, token in USERS.items():
        _write(hosts / HOST / "taskhoster-users" / f"{name}.json", {"name": name, "token": token})
    return hosts


def _write(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value))


def free_port() -> int:
    """A loopback port nothing listens on right now (for a server started
    later at a known address)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """One taskhoster process serving the fixture's hosts folder."""

    def __init__(self, root: Path, addr: str = "127.0.0.1:0") -> None:
        self.root = root
        self.hosts = write_hosts(root) if not (root / "hosts").exists() else root / "hosts"
        self.logs = root / "logs"
        self.lines: list[str] = []
        self.url = ""
        self._listening = threading.Event()
        self.proc = subprocess.Popen(
            [
                binary(), "serve",
                "--hosts", str(self.hosts), "--items", str(root / "items"), "--logs", str(self.logs),
                "--addr", addr, "--admin-addr", "127.0.0.1:0", "--sweep", "100ms", "--sync", "none",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self._listening.wait(30) or not self.url:
            self.stop()
            raise RuntimeError("the server did not listen within 30s:\n" + "\n".join(self.lines))

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("msg") == "listening" and entry.get("listener") == "api":
                self.url = "http://" + entry["addr"]
                self._listening.set()
        self._listening.set()  # exited: stop waiting

    def client(self, token: str | None = None) -> Client:
        return Client(self.url, host=HOST, token=token)

    def events(self, task_id: str | None = None) -> list[dict[str, Any]]:
        """The lines of the event log, of one task if given."""
        out = []
        for day in sorted((self.logs / "tasks").glob("*.jsonl")):
            for line in day.read_text().splitlines():
                event = json.loads(line)
                if task_id is None or event.get("id") == task_id:
                    out.append(event)
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)
        if self.proc.stderr is not None:
            self.proc.stderr.close()


class ServerTest(unittest.TestCase):
    """A test with a server of its own, started fresh for each test."""

    server: Server

    def setUp(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="taskhoster-py-"))
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.server = Server(self.dir)
        self.addCleanup(self.server.stop)
        self.alice = self.server.client(ALICE)
        self.box = self.server.client(BOX)
        self.anyone = self.server.client()
