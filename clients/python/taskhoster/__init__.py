"""A client of Taskhoster, the durable task-queue server: producers post tasks
and read their status; workers claim tasks over HTTP long-poll, report
progress, send heartbeats and hand in results or give tasks back, one call at
a time or through a Worker. Standard library only.

    from taskhoster import Client
    client = Client("http://127.0.0.1:8080", host="task.example.com", token="...")
    task_id = client.post("resize", {"url": "https://example.com/cat.jpg"})
"""

from .client import Ack, Client, Lease, Posted, Task, View
from .errors import Failure, Release, TaskhosterError, Violation
from .worker import Handler, Outcome, Worker

__all__ = [
    "Ack",
    "Client",
    "Failure",
    "Handler",
    "Lease",
    "Outcome",
    "Posted",
    "Release",
    "Task",
    "TaskhosterError",
    "View",
    "Violation",
    "Worker",
]
