"""The chaos soak's TCP proxy (tests/support/tcp_proxy.py) with a real echo server on loopback:
bytes pass, a cut closes what is open and turns new connections away, a restore lets them in."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import pytest
from tcp_proxy import TcpProxy


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            while data := conn.recv(4096):
                conn.sendall(data)

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()
    stop.set()
    server.close()


def _talk(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(payload)
        return _read(conn, len(payload))


def _read(conn: socket.socket, size: int) -> bytes:
    got = b""
    while len(got) < size:
        chunk = conn.recv(size - len(got))
        if not chunk:
            break
        got += chunk
    return got


def test_bytes_pass_both_ways(echo: tuple[str, int]) -> None:
    proxy = TcpProxy(echo).start()
    try:
        payload = bytes(range(256)) * 400  # larger than one read
        assert _talk(proxy.port, payload) == payload
        assert proxy.accepted == 1
    finally:
        proxy.stop()


def test_a_cut_closes_open_connections_and_refuses_new_ones_until_restored(
    echo: tuple[str, int],
) -> None:
    proxy = TcpProxy(echo).start()
    try:
        conn = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        conn.sendall(b"ping")
        assert _read(conn, 4) == b"ping"
        proxy.cut()
        with contextlib.suppress(ConnectionResetError):  # EOF or reset: the path is gone
            assert conn.recv(16) == b""
        conn.close()
        with (
            socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as refused,
            contextlib.suppress(ConnectionResetError),
        ):
            assert refused.recv(16) == b""
        assert proxy.refused >= 1
        proxy.restore()
        assert _talk(proxy.port, b"again") == b"again"
    finally:
        proxy.stop()


def test_an_upstream_that_is_down_closes_the_client() -> None:
    with socket.create_server(("127.0.0.1", 0)) as placeholder:
        gone = placeholder.getsockname()
    proxy = TcpProxy(gone).start()
    try:
        with (
            socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as conn,
            contextlib.suppress(ConnectionResetError),
        ):
            assert conn.recv(16) == b""
        assert proxy.accepted == 0
    finally:
        proxy.stop()
