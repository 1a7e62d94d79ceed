"""What the settings need to tell a deployment from a developer's machine
(docs/configuration.md). Pure functions over the settings' values: no Django here,
so ``config.settings`` can import them before Django is configured.
"""

from __future__ import annotations

import ipaddress
from email.utils import parseaddr

#: Host names that always mean this machine (``ALLOWED_HOSTS`` entries).
LOOPBACK_NAMES = frozenset({"localhost", "testserver", "localhost.localdomain", "ip6-localhost"})


def is_loopback(host: str) -> bool:
    """Whether an ``ALLOWED_HOSTS`` entry names only this machine: ``localhost``
    (and ``*.localhost``), a loopback address (``127.0.0.0/8``, ``[::1]``),
    Django's test client ``testserver``. ``*`` and ``.example.com`` are not."""
    name = host.strip().lower().rstrip(".")
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name.strip("[]")).is_loopback
    except ValueError:
        return False


def public_hosts(allowed_hosts: list[str]) -> list[str]:
    """The ``ALLOWED_HOSTS`` entries that are not loopback, ``*`` left out."""
    return [h.strip() for h in allowed_hosts if h.strip() and h.strip() != "*" and not is_loopback(h)]


def https_origins(allowed_hosts: list[str]) -> list[str]:
    """``CSRF_TRUSTED_ORIGINS`` for a deployment served over HTTPS at its
    ``ALLOWED_HOSTS``: ``https://host`` each, ``https://*.example.com`` for
    a ``.example.com`` entry."""
    return [f"https://*{h}" if h.startswith(".") else f"https://{h}" for h in public_hosts(allowed_hosts)]


def is_deployment(allowed_hosts: list[str]) -> bool:
    """Whether ``ALLOWED_HOSTS`` makes this a deployment: it names a host that
    is not loopback (``*`` counts: it admits every host)."""
    return any(h.strip() and not is_loopback(h) for h in allowed_hosts)


def proxy_ssl_header(value: str) -> tuple[str, str] | None:
    """``SECURE_PROXY_SSL_HEADER`` from ``"HTTP_X_FORWARDED_PROTO,https"``;
    ``None`` for an empty value. Raises ``ValueError`` for anything that is
    not ``HEADER,value`` with a header in Django's ``HTTP_…`` form."""
    value = value.strip()
    if not value:
        return None
    header, sep, expected = (part.strip() for part in value.partition(","))
    if not sep or not header.startswith("HTTP_") or not expected:
        raise ValueError(
            f"SECURE_PROXY_SSL_HEADER must be 'HTTP_HEADER_NAME,value' "
            f"(e.g. HTTP_X_FORWARDED_PROTO,https), got {value!r}"
        )
    return header, expected


def admins_setting(entries: list[str]) -> list[tuple[str, str]]:
    """Django's ``ADMINS`` (``[(name, address)]``) from the ``ADMINS``
    environment list: ``"Ops <ops@example.com>"`` or a bare address (named
    after its local part). Raises ``ValueError`` naming an entry that holds
    no address."""
    admins = []
    for entry in (e.strip() for e in entries):
        if not entry:
            continue
        name, address = parseaddr(entry)
        if "@" not in address:
            raise ValueError(
                f"ADMINS: {entry!r} is not an e-mail address (use 'Name <address>' or 'address')"
            )
        admins.append((name or address.split("@", 1)[0], address))
    return admins


def allow_list(entries: list[str], *, name: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """The networks of an allow-list setting (``name``, for the error): each
    entry an address (``10.0.0.5``, ``::1``) or a network (``10.0.0.0/24``).
    Raises ``ValueError`` naming the entry that is neither."""
    networks = []
    for entry in (e.strip() for e in entries):
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ValueError(
                f"{name}: {entry!r} is not an IP address or network (e.g. 10.0.0.5 or 10.0.0.0/24)"
            ) from None
    return networks
