"""The loopback servers of the tests close every socket they accepted when they stop.

``_Running.stop`` (``tests/servers.py``: the faulty server, the static server, the hub
stand-in) stops its loop, then closes it; ``close()`` drops whatever the loop's last turn
scheduled. A connection closed in that turn (a client's close seen as the server stops) closes
its socket one turn later, so that socket was left to the collector, which warned "unclosed
socket" in whichever later test it ran: ``test_torch_load.py``'s tied-weights case failed about
one run in eight on a socket that the dropped-connection case's faulty server had accepted.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import warnings

from aiohttp import web

from tests.servers import _Running


def test_what_the_last_turn_scheduled_runs_before_the_loop_closes() -> None:
    running = _Running(web.Application())
    loop = running.loop
    ran: list[str] = []
    stop = loop.stop

    def last_turn() -> None:
        # As a transport's close() does: its socket is closed at the next turn.
        loop.call_soon(ran.append, "closed")
        loop.stop = stop  # type: ignore[method-assign]
        stop()

    loop.stop = last_turn  # type: ignore[method-assign]
    running.stop()
    assert ran == ["closed"]


def test_a_connection_closed_in_the_last_turn_leaves_no_socket_behind() -> None:
    running = _Running(web.Application())
    loop = running.loop
    listener = socket.create_server(("127.0.0.1", 0))
    peer = socket.create_connection(listener.getsockname())
    conns = [listener.accept()[0]]

    async def adopt() -> asyncio.Transport:
        transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, conns.pop())
        return transport

    accepted = [asyncio.run_coroutine_threadsafe(adopt(), loop).result(10)]
    stop = loop.stop

    def last_turn() -> None:
        accepted[0].close()  # as a client's close seen then: its socket closes a turn later
        loop.stop = stop  # type: ignore[method-assign]
        stop()

    loop.stop = last_turn  # type: ignore[method-assign]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        running.stop()
        accepted.clear()
        gc.collect()
    peer.close()
    listener.close()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
