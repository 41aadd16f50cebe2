"""Who may do what the management routes do, asked of any request (a plugin's too)."""

from __future__ import annotations

import pytest

from lemoncore.api.guard import may_manage


def scope(
    client: str = "127.0.0.1", host: bytes = b"127.0.0.1:13305", *extra: tuple[bytes, bytes]
) -> dict[str, object]:
    return {"client": (client, 5000), "headers": [(b"host", host), *extra]}


@pytest.mark.parametrize(
    ("request_scope", "admin_key", "remote_admin", "allowed"),
    [
        (scope(), None, False, True),  # no key: this machine may
        (scope("192.168.1.7"), None, False, False),  # another machine may not
        (scope("192.168.1.7"), None, True, True),  # unless allow_remote_admin
        (scope("127.0.0.1", b"127.0.0.1", (b"x-forwarded-for", b"1.2.3.4")), None, False, False),
        (scope("127.0.0.1", b"lemon.example"), None, False, False),  # not named by loopback
        (scope(), "admin", False, False),  # a key is set: this machine needs it too
        (scope("127.0.0.1", b"127.0.0.1", (b"x-api-key", b"user")), "admin", False, False),
        (scope("127.0.0.1", b"127.0.0.1", (b"x-api-key", b"admin")), "admin", False, True),
        (scope("10.0.0.2", b"h", (b"authorization", b"Bearer admin")), "admin", False, True),
    ],
)
def test_may_manage(
    request_scope: dict[str, object], admin_key: str | None, remote_admin: bool, allowed: bool
) -> None:
    assert may_manage(request_scope, admin_key, remote_admin) is allowed
