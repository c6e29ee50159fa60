"""The daemons' TCP connections send small frames at once (Nagle's algorithm off): a task's
exit frame written behind an unacknowledged one would otherwise wait for the peer's delayed
acknowledgement, tens of milliseconds of every srun."""

from __future__ import annotations

import asyncio
import socket

from muster.protocol.httpd import bind_tcp


def test_connections_accepted_on_a_daemons_listener_have_nodelay() -> None:
    async def main() -> int:
        listener = bind_tcp("127.0.0.1", 0)
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            sock = writer.get_extra_info("socket")
            accepted.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(on_connect, sock=listener)
        async with server:
            _, writer = await asyncio.open_connection(*listener.getsockname()[:2])
            value = await asyncio.wait_for(accepted, 10)
            writer.close()
        return value

    assert asyncio.run(main()) != 0
