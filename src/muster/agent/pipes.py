"""Reading and writing a pipe from the agent's event loop without blocking it."""

from __future__ import annotations

import asyncio
import errno
import os

__all__ = ["read_pipe", "write_pipe"]


async def read_pipe(fd: int, *, line: bool = False, close: bool = True) -> bytes:
    """What ``fd`` gives until its end or, with ``line``, until a newline has come (or the
    end). The fd is made non-blocking, and closed afterwards unless ``close`` is False."""
    loop = asyncio.get_running_loop()
    chunks: list[bytes] = []
    done: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        try:
            data = os.read(fd, 4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            chunks.append(data)
        if (not data or (line and b"\n" in data)) and not done.done():
            done.set_result(None)

    os.set_blocking(fd, False)
    loop.add_reader(fd, readable)
    try:
        await done
    finally:
        loop.remove_reader(fd)
        if close:
            os.close(fd)
    return b"".join(chunks)


async def write_pipe(fd: int, data: bytes) -> bool:
    """Write all of ``data`` to a pipe (a task's stdin) without blocking the agent's event
    loop; False once the pipe is closed at the other end."""
    loop = asyncio.get_running_loop()
    os.set_blocking(fd, False)
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
            view = view[n:]
        except BlockingIOError:
            ready: asyncio.Future[None] = loop.create_future()
            loop.add_writer(fd, _settle, ready)
            try:
                await ready
            finally:
                loop.remove_writer(fd)
        except OSError as e:
            if e.errno in (errno.EPIPE, errno.EBADF):
                return False
            raise
    return True


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
