"""A TCP proxy a test puts between pgferry and a server to break the path without privileges.

:class:`TcpProxy` listens on a free port of 127.0.0.1 and forwards every connection to
``target``, each direction in a thread of its own.  A test can :meth:`~TcpProxy.cut` the
connections open now (both ends see the connection reset, as when a router or a server's
host restarts), :meth:`~TcpProxy.refuse` new ones (the port closed: connects fail at once),
:meth:`~TcpProxy.pause` forwarding (bytes wait in the proxy) and :meth:`~TcpProxy.heal`.

What it cannot do is a silent stall: its own kernel goes on acknowledging what the client
sends and answering keepalives, so a client's keepalives and TCP user timeout never fire.
Tests of a dead path that drops every packet use :mod:`pgferry.testing.netpath` (network
namespaces, root only).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from dataclasses import dataclass, field

from pgferry.testing.cluster import free_port


@dataclass
class TcpProxy:
    """Forwards 127.0.0.1:``port`` to ``target`` (host, port) until :meth:`close`."""

    target: tuple[str, int]
    port: int = field(default_factory=free_port)
    accepted: int = 0  # connections accepted since the start
    _listener: socket.socket | None = None
    _pairs: list[tuple[socket.socket, socket.socket]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _flowing: threading.Event = field(default_factory=threading.Event)
    _closed: bool = False

    def start(self) -> TcpProxy:
        self._flowing.set()
        self._listen()
        return self

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def connstr(self, base: str) -> str:
        """``base`` (a key=value connect string) pointed at the proxy."""
        return f"{base} host=127.0.0.1 port={self.port}"

    # --- faults ------------------------------------------------------------------------
    def cut(self) -> int:
        """Reset every connection open now (new ones are still taken); how many there were."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for sock in pair:
                _reset(sock)
        return len(pairs)

    def refuse(self) -> None:
        """Close the listening port: new connections are refused; open ones go on."""
        with self._lock:
            listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
            listener.close()

    def pause(self) -> None:
        """Stop forwarding in both directions (what is sent waits in the proxy)."""
        self._flowing.clear()

    def heal(self) -> None:
        """Forward again and take new connections."""
        self._flowing.set()
        if self._listener is None and not self._closed:
            self._listen()

    def close(self) -> None:
        self._closed = True
        self.refuse()
        self._flowing.set()
        self.cut()

    # --- forwarding --------------------------------------------------------------------
    def _listen(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # refused or closed
            try:
                server = socket.create_connection(self.target, timeout=10)
                server.settimeout(None)
            except OSError:
                _reset(client)
                continue
            pair = (client, server)
            with self._lock:
                self._pairs.append(pair)
                self.accepted += 1
            for src, dst in (pair, pair[::-1]):
                threading.Thread(target=self._pipe, args=(src, dst, pair), daemon=True).start()

    def _pipe(
        self, src: socket.socket, dst: socket.socket, pair: tuple[socket.socket, socket.socket]
    ) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                self._flowing.wait()
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)
            with self._lock:  # one side ended: the connection is no longer open
                if pair in self._pairs:
                    self._pairs.remove(pair)


def _reset(sock: socket.socket) -> None:
    """Close with a reset, not a FIN: the peer learns at once that the connection is gone."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RD)  # wakes the thread reading it; sends nothing
    with contextlib.suppress(OSError):
        sock.close()
