"""HTTPS with client certificates: only a caller with a certificate from the client CA gets in."""

from __future__ import annotations

import datetime as dt
import ssl
from pathlib import Path

import aiohttp
import pytest

from carico.tls import make_ca, make_leaf, server_ssl_context, write_pair
from scheduler_ext.cluster import InMemoryCluster
from scheduler_ext.http_server import build_app, start_http
from scheduler_ext.service import ExtenderService

from .conftest import extender_args, pod_object


async def test_client_certificates_are_required_when_a_client_ca_is_set(tmp_path: Path) -> None:
    now = dt.datetime.now(dt.UTC)
    ca, rogue_ca = make_ca(now=now), make_ca("rogue", now=now)
    ca_file, _ = write_pair(ca, tmp_path, "ca")
    crt, key = write_pair(
        make_leaf(ca, "extender", now=now, hosts=("127.0.0.1",), client=False), tmp_path, "srv"
    )
    sched_crt, sched_key = write_pair(
        make_leaf(ca, "kube-scheduler", now=now, server=False), tmp_path, "sched"
    )
    rogue_crt, rogue_key = write_pair(
        make_leaf(rogue_ca, "kube-scheduler", now=now, server=False), tmp_path, "rogue"
    )
    service = ExtenderService(InMemoryCluster())
    http = await start_http(
        build_app(service), "127.0.0.1", 0, server_ssl_context(crt, key, ca_file)
    )
    url = f"https://127.0.0.1:{http.port}/scheduler/filter"
    body = extender_args(pod_object(), ["n1"])

    async def call(cert: Path | None, key_file: Path | None) -> int:
        context = ssl.create_default_context(cafile=str(ca_file))
        if cert is not None:
            context.load_cert_chain(str(cert), str(key_file))
        connector = aiohttp.TCPConnector(ssl=context)
        async with (
            aiohttp.ClientSession(connector=connector) as session,
            session.post(url, data=body) as resp,
        ):
            return resp.status

    try:
        assert await call(sched_crt, sched_key) == 200
        for cert, key_file in ((None, None), (rogue_crt, rogue_key)):
            with pytest.raises(aiohttp.ClientError):
                await call(cert, key_file)
    finally:
        await http.close()
