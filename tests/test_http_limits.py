"""The real server (Hypercorn) refuses oversized headers and keeps serving."""

from __future__ import annotations

import http.client
from pathlib import Path
from urllib.parse import urlparse

import httpx

from lemoncore.testing import running_server


def test_huge_headers_get_431_and_the_server_keeps_serving(tmp_path: Path) -> None:
    with running_server(tmp_path) as server:
        address = urlparse(server.url)
        connection = http.client.HTTPConnection(address.hostname or "", address.port)
        connection.putrequest("GET", "/v1/models")
        connection.putheader("X-Big", "a" * 200_000)
        connection.endheaders()
        assert connection.getresponse().status == 431
        connection.close()
        assert httpx.get(server.api + "/models").status_code == 200
