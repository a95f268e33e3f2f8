"""Who holds one of the live view's connection threads, and for how long.

A connection first waits: it must send its whole first request head (request line and
headers) within `HEAD_TIMEOUT_S` of being accepted, and at most `MAX_WAITING` wait at
once; one more cuts the oldest waiting. A connection whose head holds the token (any
complete head when no token is configured) is admitted to one of `MAX_CONNECTIONS`
slots of its own, beyond which it is answered 503. So sockets that trickle a header
line now and then (slowloris), or never send one, are cut within seconds and never
take the slots of those that present the token; a kept-alive admitted connection has
the idle timeout for its next request head.
"""
from __future__ import annotations

import contextlib
import io
import socket
import threading
import time
import urllib.parse
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler

from pipeline.web.auth import authorised
from pipeline.web.request import App

BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 21\r\n"
        b"Retry-After: 1\r\nConnection: close\r\n\r\ntoo many connections\n")


class HeadReader(io.RawIOBase):
    """The socket as the handler reads it: until `deadline` (monotonic seconds; None: no
    deadline) every read waits only for the time left, so a head sent a byte at a time
    ends at the deadline rather than an idle timeout per byte."""

    def __init__(self, sock: socket.socket, idle_s: float):
        self.sock = sock
        self.idle_s = idle_s
        self.deadline: float | None = None
        self.expired = False  # a read ran out of time while a deadline was set

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        wait = self.idle_s
        if self.deadline is not None:
            wait = min(wait, self.deadline - time.monotonic())
        try:
            if wait <= 0:
                raise TimeoutError("timed out")
            self.sock.settimeout(wait)
            return self.sock.recv_into(buffer)
        except TimeoutError:
            self.expired = self.deadline is not None
            raise


class Slots:
    """The connections held: waiting (oldest first) and admitted."""

    def __init__(self, max_waiting: int, max_admitted: int):
        self.max_waiting = max_waiting
        self.max_admitted = max_admitted
        self._waiting: OrderedDict[socket.socket, None] = OrderedDict()
        self._admitted: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.refused = 0  # answered 503: every admitted slot was taken
        self.cut = 0  # waiting connections cut: their head came too slowly, or newer ones needed the room

    def arrive(self, request: socket.socket) -> None:
        """A connection accepted: it waits, cutting the oldest waiting one when they are many."""
        with self._lock:
            oldest = next(iter(self._waiting)) if len(self._waiting) >= self.max_waiting else None
            if oldest is not None:
                del self._waiting[oldest]
                self.cut += 1
            self._waiting[request] = None
        if oldest is not None:
            with contextlib.suppress(OSError):
                oldest.shutdown(socket.SHUT_RDWR)  # its thread reads the end and finishes

    def admit(self, request: socket.socket) -> bool | None:
        """Whether the connection got an admitted slot (None: it was cut meanwhile)."""
        with self._lock:
            if request in self._admitted:
                return True
            if request not in self._waiting:
                return None
            if len(self._admitted) >= self.max_admitted:
                self.refused += 1
                return False
            del self._waiting[request]
            self._admitted.add(request)
            return True

    def timed_out(self) -> None:
        with self._lock:
            self.cut += 1

    def leave(self, request: socket.socket) -> None:
        with self._lock:
            self._waiting.pop(request, None)
            self._admitted.discard(request)

    def held(self) -> list[socket.socket]:
        with self._lock:
            return [*self._waiting, *self._admitted]


class AdmittedHandler(BaseHTTPRequestHandler):
    """The request handler's admission: the head's deadline, then an admitted slot for a
    head that holds the token. After `parse_request`, `target`, `query`, `query_token`
    and `authorised` describe the request."""

    @property
    def app(self) -> App:
        return self.server.app  # type: ignore[attr-defined]

    @property
    def slots(self) -> Slots:
        return self.server.slots  # type: ignore[attr-defined]

    def setup(self) -> None:
        self.timeout = self.app.IDLE_TIMEOUT_S
        super().setup()
        self.rfile.close()  # the socket's own reader, replaced by one that keeps the head's deadline
        self._reader = HeadReader(self.connection, self.timeout)
        self.rfile = io.BufferedReader(self._reader)
        self._first_head_by = time.monotonic() + self.app.HEAD_TIMEOUT_S

    def handle_one_request(self) -> None:
        first = self._first_head_by
        self._reader.deadline = first if first is not None else time.monotonic() + self.timeout
        self._first_head_by = None
        super().handle_one_request()  # a read past the deadline ends the connection there (TimeoutError)
        if first is not None and self._reader.expired:
            self.slots.timed_out()
        self._reader.deadline = None

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        self._reader.deadline = None
        self.connection.settimeout(self.timeout)
        url = urllib.parse.urlsplit(self.path)
        self.target, self.query = url.path, urllib.parse.parse_qs(url.query)
        self.query_token = (self.query.get("token") or [""])[0]
        self.authorised = authorised(self.app.config.token, self.headers, self.query_token)
        if not self.authorised:
            self.close_connection = True  # it has its answer (401); it never waits for another
            return True
        admitted = self.slots.admit(self.request)
        if not admitted:
            self.close_connection = True
            if admitted is False:
                self.wfile.write(BUSY)
            return False
        return True
