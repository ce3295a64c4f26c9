"""FaultRelay: a TCP relay on loopback that injects the faults a store's network can have.

Put between the bridge and PostgreSQL (or any TCP server), it passes bytes both ways until told otherwise:

- ``blackhole()``: nothing moves any more, and nothing is refused. Connections stay open and new ones are
  accepted; their bytes are taken by the kernel (acknowledged) and held. This is a failover, a lost route or a
  frozen host as a client behind a proxy sees it: libpq's timeouts never fire.
- ``slow(delay_s)``: every chunk waits ``delay_s`` before it is passed on.
- ``reset()``: every open connection is closed with a RST on both sides (what a failover ends with).
- ``refuse()``: new connections are reset as soon as they arrive; ``passing()`` undoes any of these.

Only loopback is ever used: it listens on 127.0.0.1 and forwards to the address it is given. Each connection
costs two threads, every loop polls at least ten times a second, and ``close()`` ends them all.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

PASS, BLACKHOLE, SLOW, REFUSE = "pass", "blackhole", "slow", "refuse"
_POLL_S = 0.05
_CHUNK = 65536


class FaultRelay:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        assert upstream_host in ("127.0.0.1", "localhost", "::1"), "the relay forwards to loopback only"
        self._upstream = (upstream_host, upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(_POLL_S)
        self.port = int(self._listener.getsockname()[1])
        self._mode = PASS
        self._delay_s = 0.0
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._closed = threading.Event()
        self._threads: list[threading.Thread] = []
        self._spawn(self._accept_loop)

    # -- the faults -----------------------------------------------------------------------------------

    def passing(self) -> None:
        self._set(PASS)

    def blackhole(self) -> None:
        self._set(BLACKHOLE)

    def slow(self, delay_s: float) -> None:
        self._delay_s = delay_s
        self._set(SLOW)

    def refuse(self) -> None:
        self._set(REFUSE)

    def reset(self) -> int:
        """RST every open connection on both of its sides; returns how many were open."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for sock in pair:
                _reset(sock)
        return len(pairs)

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._pairs)

    def close(self) -> None:
        self._closed.set()
        self.reset()
        self._listener.close()
        for thread in self._threads:
            thread.join(timeout=2)

    # -- the relay ------------------------------------------------------------------------------------

    def _set(self, mode: str) -> None:
        with self._lock:
            self._mode = mode

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            if self._mode == REFUSE:
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(self._upstream, timeout=2)
            except OSError:
                _reset(client)
                continue
            with self._lock:
                self._pairs.append((client, upstream))
            self._spawn(self._pump, client, upstream)
            self._spawn(self._pump, upstream, client)

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        while not self._closed.is_set():
            if self._mode == BLACKHOLE:  # hold: read nothing, so the kernel's buffers keep the bytes
                time.sleep(_POLL_S)
                continue
            try:
                readable, _, _ = select.select([source], [], [], _POLL_S)
                if not readable:
                    continue
                data = source.recv(_CHUNK)
                if not data:
                    break
                if self._mode == SLOW:
                    time.sleep(self._delay_s)
                sink.sendall(data)
            except (OSError, ValueError):
                break
        with self._lock:
            self._pairs = [pair for pair in self._pairs if source not in pair]
        for sock in (source, sink):
            _reset(sock)

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        self._threads.append(thread)
        thread.start()


def _reset(sock: socket.socket) -> None:
    """Close with SO_LINGER 0: the peer gets a RST, not a FIN."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


@contextmanager
def fault_relay(upstream_host: str, upstream_port: int) -> Iterator[FaultRelay]:
    relay = FaultRelay(upstream_host, upstream_port)
    try:
        yield relay
    finally:
        relay.close()
