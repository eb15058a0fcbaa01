"""The README's producer and worker, run as they are written against the real
server: the producer posts, the worker finishes the task, Ctrl-C stops it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from .server import ALICE, BOX, HOST, ServerTest, binary

HERE = Path(__file__).resolve().parent.parent  # clients/python
README = HERE / "README.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.S | re.M)


class ReadmeTest(ServerTest):
    def env(self, token: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            TASKHOSTER_SERVER=self.server.url,
            TASKHOSTER_HOST=HOST,
            TASKHOSTER_TOKEN=token,
            PYTHONPATH=str(HERE) + os.pathsep + env.get("PYTHONPATH", ""),
        )
        return env

    def test_examples(self) -> None:
        blocks = python_blocks(README.read_text())
        self.assertEqual(len(blocks), 2, "the README should have a producer and a worker")
        producer, worker = blocks
        for name, block in (("producer", producer), ("worker", worker)):
            code = [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]
            self.assertLessEqual(len(code), 10, f"the {name} is more than ten lines")

        posted = subprocess.run([sys.executable, "-c", producer], env=self.env(ALICE), capture_output=True, text=True, timeout=60)
        self.assertEqual(posted.returncode, 0, posted.stderr)
        task_id, status = posted.stdout.splitlines()
        self.assertRegex(task_id, r"^[0-9a-f]{16}$")
        self.assertEqual(status, "pending None")

        work = subprocess.Popen([sys.executable, "-c", worker], env=self.env(BOX), stderr=subprocess.PIPE, text=True)
        self.addCleanup(work.kill)  # a no-op once it exited
        # The command line's watch prints each view until the task is done.
        watched = subprocess.run([binary(), "watch", "resize", task_id], env=self.env(ALICE), capture_output=True, text=True, timeout=60)
        self.assertEqual(watched.returncode, 0, watched.stderr)
        last = json.loads(watched.stdout.splitlines()[-1])
        self.assertEqual(last["status"], "finished")
        self.assertEqual(last["result"], {"thumbnail": "https://example.com/cat.jpg?width=200"})
        self.assertEqual(last["progress"], {"percent": 50})

        work.send_signal(signal.SIGINT)
        _, stderr = work.communicate(timeout=60)
        self.assertEqual(work.returncode, 0, stderr)
        self.assertNotIn("Traceback", stderr)
