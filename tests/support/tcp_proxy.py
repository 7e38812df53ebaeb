"""A TCP proxy on 127.0.0.1 whose connections a test can cut and restore (the chaos soak puts
one between each agent and the extender, and one between each agent and the aggregator).

While cut, every open connection is closed at once (both sides see a reset or an EOF, as when a
network path drops) and new connections are accepted and closed straight away, so the client
sees its peer refuse; :meth:`TcpProxy.restore` lets connections through again. The upstream may
be down (a restarting extender): the client's connection is then closed, as a refused connect
would be. Threads, one pair per connection: the soak's few long-lived gRPC streams need no more.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpProxy:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._cut = False
        self._stop = threading.Event()
        self.accepted = 0
        self.refused = 0  # connections closed at once because the proxy was cut
        self._thread = threading.Thread(target=self._accept_loop, daemon=True, name="tcp-proxy")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> TcpProxy:
        self._thread.start()
        return self

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            doomed = list(self._open)
            self._open.clear()
        for sock in doomed:
            _close(sock)

    def restore(self) -> None:
        with self._lock:
            self._cut = False

    @property
    def is_cut(self) -> bool:
        return self._cut

    def stop(self) -> None:
        self._stop.set()
        self.cut()
        _close(self._listener)
        self._thread.join(5)

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed by stop()
            with self._lock:
                cut = self._cut
            if cut:
                self.refused += 1
                _close(client)
                continue
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                _close(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                if self._cut:  # cut while connecting
                    _close(client)
                    _close(upstream)
                    continue
                self._open.update((client, upstream))
            self.accepted += 1
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(
                    target=self._pump, args=(src, dst), daemon=True, name="tcp-proxy-pump"
                ).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        with self._lock:
            self._open.discard(src)
            self._open.discard(dst)
        _close(src)
        _close(dst)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
