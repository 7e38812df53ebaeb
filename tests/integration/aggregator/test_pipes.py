"""The merger-worker pipe under uvloop (the command's default loop): watching it for reads must
leave it blocking, or a full pipe fails a send with EAGAIN and a worker takes its merger for gone
(seen at 10,000 messages a second: workers restarted in a loop)."""

import asyncio
import multiprocessing
import os

import uvloop

from aggregator.worker import watch_pipe


def test_a_watched_pipe_stays_blocking_under_uvloop() -> None:
    async def check() -> tuple[bool, bool]:
        loop = asyncio.get_running_loop()
        plain, _ = multiprocessing.Pipe()
        watched, _ = multiprocessing.Pipe()
        loop.add_reader(plain.fileno(), lambda: None)
        watch_pipe(watched, lambda: None)
        try:
            return os.get_blocking(plain.fileno()), os.get_blocking(watched.fileno())
        finally:
            loop.remove_reader(plain.fileno())
            loop.remove_reader(watched.fileno())

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        plain_blocking, watched_blocking = runner.run(check())
    assert not plain_blocking  # what uvloop does to a watched descriptor (why watch_pipe exists)
    assert watched_blocking
