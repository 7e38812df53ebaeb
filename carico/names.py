"""Kubernetes object names as the API server validates them, for everything that takes names
from a client (docs/architecture.md#extender-protocol).

Pod, node, priority-class and scheduler names are DNS-1123 subdomains (lower-case alphanumerics,
'-' and '.', each dot-separated label starting and ending alphanumeric, at most 253 characters);
a namespace is a DNS-1123 label (no dots, at most 63). UIDs are the API server's UUIDs; anything
up to :data:`MAX_UID` printable characters is accepted, so that hand-made ones still work. Names
that break these rules cannot exist in a cluster, so refusing them costs a real client nothing
and bounds what a hostile one can make the services remember. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Container, Iterable

MAX_SUBDOMAIN = 253
MAX_LABEL = 63
MAX_UID = 128  # a UUID has 36 characters

_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
SUBDOMAIN = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
LABEL = re.compile(_LABEL)
_UID = re.compile(r"[!-~]*")  # printable ASCII, no spaces


def _shown(value: str) -> str:
    """A client's string as quoted in a message: cut short, every odd character escaped."""
    return ascii(value[:64]) + ("..." if len(value) > 64 else "")


def subdomain_problem(name: str, what: str) -> str | None:
    """Why ``name`` is not a DNS-1123 subdomain (``what`` says which name it is), or None.

    >>> subdomain_problem("node-1.zone-a", "node name") is None
    True
    >>> subdomain_problem("Node_1", "node name")
    "node name 'Node_1' is not a DNS-1123 subdomain (lower-case letters, digits, '-' and '.')"
    """
    if not name:
        return f"{what} is empty"
    if len(name) > MAX_SUBDOMAIN:
        return f"{what} is {len(name)} characters long (at most {MAX_SUBDOMAIN})"
    if SUBDOMAIN.fullmatch(name) is None:
        return (
            f"{what} {_shown(name)} is not a DNS-1123 subdomain "
            "(lower-case letters, digits, '-' and '.')"
        )
    return None


def label_problem(name: str, what: str) -> str | None:
    """Why ``name`` is not a DNS-1123 label (a namespace, say), or None.

    >>> label_problem("kube-system", "namespace") is None, label_problem("a.b", "namespace")
    (True, "namespace 'a.b' is not a DNS-1123 label (lower-case letters, digits and '-')")
    """
    if not name:
        return f"{what} is empty"
    if len(name) > MAX_LABEL:
        return f"{what} is {len(name)} characters long (at most {MAX_LABEL})"
    if LABEL.fullmatch(name) is None:
        return f"{what} {_shown(name)} is not a DNS-1123 label (lower-case letters, digits and '-')"
    return None


def uid_problem(uid: str, what: str) -> str | None:
    """Why ``uid`` cannot be a UID (empty is allowed: unknown), or None."""
    if len(uid) > MAX_UID:
        return f"{what} is {len(uid)} characters long (at most {MAX_UID})"
    if _UID.fullmatch(uid) is None:
        return f"{what} {_shown(uid)} has characters other than printable ASCII"
    return None


def subdomains_problem(names: Iterable[str], what: str, known: Container[str] = ()) -> str | None:
    """The first problem among ``names`` (each a subdomain), or None; names in ``known`` passed
    before and are not matched again (a lookup is several times cheaper than the pattern)."""
    fullmatch = SUBDOMAIN.fullmatch
    for name in names:
        if name in known:
            continue
        if len(name) > MAX_SUBDOMAIN or fullmatch(name) is None:
            return subdomain_problem(name, what)
    return None
