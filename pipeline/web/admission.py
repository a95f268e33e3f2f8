"""Who holds one of the live view's connections, and for how long.

A new connection first waits: it must send its whole first request head within
`head_s` (or the idle timeout, if shorter) of being accepted, and at most `max_waiting`
wait at once; one more cuts the oldest waiting. A request whose head holds the token
(any head when no token is configured) admits its connection to one of `max_admitted`
places of its own, beyond which it is answered 503; one without the token is answered
401 and closed. So sockets that trickle a header line now and then (slowloris), or never
send one, are cut within seconds and never take the places of those that present the
token; a kept-alive admitted connection has aiohttp's idle (keep-alive) timeout for its
next request. A WebSocket is a request like any other: its upgrade needs the token and
a place. Everything here runs on the server's event loop: no locks.
"""
from __future__ import annotations

import asyncio
import logging
import urllib.parse
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from aiohttp import web

from pipeline.errors import one_line
from pipeline.web.auth import authorised

log = logging.getLogger("pipeline.web")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class Admission:
    """The connections held, waiting (oldest first) and admitted, keyed by transport."""

    max_waiting: int
    max_admitted: int
    head_s: float
    token: str | None
    waiting: OrderedDict[asyncio.BaseTransport, asyncio.TimerHandle] = field(default_factory=OrderedDict)
    admitted: set[asyncio.BaseTransport] = field(default_factory=set)
    refused: int = 0  # answered 503: every admitted place was taken
    cut: int = 0  # waiting connections cut: their head came too slowly, or newer ones needed the room

    def arrive(self, transport: asyncio.BaseTransport) -> None:
        """A connection accepted: it waits, cutting the oldest waiting one when they are many."""
        if len(self.waiting) >= self.max_waiting:
            oldest, timer = self.waiting.popitem(last=False)
            timer.cancel()
            self.cut += 1
            oldest.close()
        self.waiting[transport] = asyncio.get_running_loop().call_later(self.head_s, self._late, transport)

    def _late(self, transport: asyncio.BaseTransport) -> None:
        if self.waiting.pop(transport, None) is not None:
            self.cut += 1
            transport.close()

    def admit(self, transport: asyncio.BaseTransport | None) -> bool:
        """Whether the connection holds (or now got) an admitted place."""
        if transport in self.admitted:
            return True
        timer = self.waiting.get(transport) if transport is not None else None
        if timer is None or len(self.admitted) >= self.max_admitted:
            self.refused += timer is not None
            return False
        timer.cancel()
        del self.waiting[transport]
        self.admitted.add(transport)
        return True

    def leave(self, transport: asyncio.BaseTransport) -> None:
        timer = self.waiting.pop(transport, None)
        if timer is not None:
            timer.cancel()
        self.admitted.discard(transport)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """The token, then a place, before any route (or the router's 404) answers."""
        query = urllib.parse.parse_qs(request.rel_url.raw_query_string)
        if not authorised(self.token, request.headers, (query.get("token") or [""])[0]):
            answer = web.Response(status=401, text="a token is needed\n", headers={"WWW-Authenticate": "Bearer"})
        elif not self.admit(request.transport):
            answer = web.Response(status=503, text="too many connections\n", headers={"Retry-After": "1"})
        else:
            return await handler(request)
        answer.force_close()  # it has its answer: it never waits for another
        return answer


class Gate(asyncio.Protocol):
    """aiohttp's protocol for one connection, with its admission around it: accepted, it
    waits (`Admission.arrive`); gone, it leaves, with one debug line when the client reset it."""

    def __init__(self, inner: asyncio.Protocol, admission: Admission):
        self.inner = inner
        self.admission = admission
        self.peer = "?"
        self._transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.peer = str((transport.get_extra_info("peername") or ("?",))[0])
        self.admission.arrive(transport)
        self._transport = transport
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is not None:
            self.admission.leave(self._transport)
        if exc is not None:
            log.debug("%s went away: %s", self.peer, one_line(exc))
        self.inner.connection_lost(exc)
