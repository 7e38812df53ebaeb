"""``carico certs``: the mTLS material of a Carico installation (docs/architecture.md#security).

Issues one CA and a certificate per component, using :mod:`carico.tls`:

* ``aggregator`` — server certificate for its gRPC Service (agents exchange models with it), also
  usable as a client certificate towards a parent aggregator;
* ``extender`` — server certificate for the CapacityIngest gRPC Service (agents stream capacity to
  it) and for its HTTPS endpoint that kube-scheduler calls on loopback, also a client certificate;
* ``agent`` — client certificate shared by every node agent (SAN ``carico-agent``).

Output is files in a directory (``ca.crt``, ``ca.key``, ``<component>.crt``, ``<component>.key``)
and/or Kubernetes Secrets on stdout: one ``kubernetes.io/tls`` Secret per component named
``carico-<component>-tls`` with keys ``ca.crt``, ``tls.crt`` and ``tls.key`` — the layout
cert-manager writes, so the manifests mount either the same way. The CA key is never put in a
Secret. The pure part (:func:`plan`, :func:`issue`, :func:`secret_manifests`) does no I/O and takes
the clock as a parameter; :func:`run` reads and writes files.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import ipaddress
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from carico.tls import KeyPair, make_ca, make_leaf, write_pair

DEFAULT_NAMESPACE = "carico-system"
DEFAULT_CLUSTER_DOMAIN = "cluster.local"
AGGREGATOR_SERVICE = "carico-aggregator"
EXTENDER_SERVICE = "carico-extender"
AGENT_NAME = "carico-agent"
DEFAULT_DAYS = 365
DEFAULT_CA_DAYS = 3650
# kube-scheduler reaches its extender sidecar on loopback.
LOOPBACK = ("localhost", "127.0.0.1", "::1")

_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
# A DNS name; only the first label may be a wildcard ("*").
_HOST = re.compile(
    r"^(?=.{1,253}$)(\*|[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?)"
    r"(\.[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?)*$"
)


@dataclass(frozen=True)
class Leaf:
    """What one component's certificate says: its name, hosts and key usages."""

    component: str
    common_name: str
    hosts: tuple[str, ...]
    server: bool
    client: bool


@dataclass(frozen=True)
class Bundle:
    """A CA and the certificates it signed, by component."""

    ca: KeyPair
    leaves: dict[str, KeyPair]


def service_hosts(service: str, namespace: str, cluster_domain: str) -> tuple[str, ...]:
    """Every name a pod may use for a Service: short, namespaced, ``.svc`` and fully qualified."""
    return (
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.{cluster_domain}",
    )


def plan(
    namespace: str = DEFAULT_NAMESPACE,
    *,
    cluster_domain: str = DEFAULT_CLUSTER_DOMAIN,
    aggregator_service: str = AGGREGATOR_SERVICE,
    extender_service: str = EXTENDER_SERVICE,
    extra_hosts: dict[str, tuple[str, ...]] | None = None,
) -> list[Leaf]:
    """The certificates of an installation in ``namespace``; ``extra_hosts`` adds SANs."""
    for label, value in (
        ("namespace", namespace),
        ("aggregator service", aggregator_service),
        ("extender service", extender_service),
    ):
        if not _LABEL.match(value):
            raise ValueError(f"{label} {value!r} is not a DNS label (a-z, 0-9, '-', ≤ 63)")
    if not is_host(cluster_domain):
        raise ValueError(f"cluster domain {cluster_domain!r} is not a DNS name")
    extra = extra_hosts or {}
    for component, hosts in extra.items():
        if component not in ("aggregator", "extender"):
            raise ValueError(f"extra names only go on server certificates, not on {component!r}")
        for host in hosts:
            if not is_host(host):
                raise ValueError(f"{host!r} is neither a DNS name nor an IP address")
    aggregator = service_hosts(aggregator_service, namespace, cluster_domain)
    extender = service_hosts(extender_service, namespace, cluster_domain) + LOOPBACK
    return [
        Leaf(
            "aggregator",
            aggregator_service,
            _unique(aggregator + extra.get("aggregator", ())),
            server=True,
            client=True,
        ),
        Leaf(
            "extender",
            extender_service,
            _unique(extender + extra.get("extender", ())),
            server=True,
            client=True,
        ),
        # A client certificate too names its holder in a SAN: verifiers no longer read the CN.
        Leaf("agent", AGENT_NAME, (AGENT_NAME,), server=False, client=True),
    ]


def issue(
    leaves: Sequence[Leaf],
    *,
    now: dt.datetime,
    days: int = DEFAULT_DAYS,
    ca_days: int = DEFAULT_CA_DAYS,
    ca: KeyPair | None = None,
) -> Bundle:
    """Sign every leaf with ``ca``, or with a new CA valid ``ca_days`` days."""
    if days < 1 or ca_days < 1:
        raise ValueError("validity must be at least one day")
    if ca is None:
        if ca_days < days:
            raise ValueError(f"the CA ({ca_days} days) must outlive the certificates ({days} days)")
        ca = make_ca(now=now, valid_days=ca_days)
    else:
        expires = x509.load_pem_x509_certificate(ca.cert_pem).not_valid_after_utc
        if expires < now + dt.timedelta(days=days):
            raise ValueError(
                f"the CA expires {expires:%Y-%m-%d}, before certificates valid {days} days would"
            )
    signed = {
        leaf.component: make_leaf(
            ca,
            leaf.common_name,
            now=now,
            hosts=leaf.hosts,
            server=leaf.server,
            client=leaf.client,
            valid_days=days,
        )
        for leaf in leaves
    }
    return Bundle(ca, signed)


def load_ca(cert_pem: bytes, key_pem: bytes) -> KeyPair:
    """Check that a PEM pair is a CA certificate with its EC private key."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except ValueError as exc:
        raise ValueError(f"not a PEM certificate and unencrypted PEM key: {exc}") from exc
    try:
        is_ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        is_ca = False
    if not is_ca:
        raise ValueError("the certificate is not a CA (no basicConstraints CA:TRUE)")
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key must be an EC key (as carico certs makes)")
    public = cert.public_key()
    if (
        not isinstance(public, ec.EllipticCurvePublicKey)
        or public.public_numbers() != key.public_key().public_numbers()
    ):
        raise ValueError("the CA key does not belong to the CA certificate")
    return KeyPair(cert_pem, key_pem)


def secret_name(component: str) -> str:
    return f"carico-{component}-tls"


def secret_manifests(bundle: Bundle, namespace: str) -> list[dict[str, Any]]:
    """One ``kubernetes.io/tls`` Secret per component, with the CA certificate as ``ca.crt``."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode("ascii")

    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": secret_name(component),
                "namespace": namespace,
                "labels": {
                    "app.kubernetes.io/name": "carico",
                    "app.kubernetes.io/component": component,
                    "app.kubernetes.io/managed-by": "carico-certs",
                },
            },
            "type": "kubernetes.io/tls",
            "data": {
                "ca.crt": b64(bundle.ca.cert_pem),
                "tls.crt": b64(pair.cert_pem),
                "tls.key": b64(pair.key_pem),
            },
        }
        for component, pair in bundle.leaves.items()
    ]


def render(manifests: list[dict[str, Any]], fmt: str) -> str:
    """YAML documents separated by ``---``, or a JSON ``v1 List``; both ``kubectl apply -f -``."""
    if fmt == "yaml":
        return yaml.safe_dump_all(manifests, explicit_start=True, sort_keys=False)
    if fmt == "json":
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": manifests}, indent=2) + "\n"
    raise ValueError(f"unknown format {fmt!r}")


def is_host(text: str) -> bool:
    """A DNS name (a wildcard first label allowed) or an IP address."""
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return bool(_HOST.match(text))


def _unique(hosts: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(hosts))


# --- command line --------------------------------------------------------------------------------


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"not a positive number of days: {text}")
    return value


def _extra(text: str) -> tuple[str, str]:
    component, sep, host = text.partition("=")
    if not sep or component not in ("aggregator", "extender") or not host:
        raise argparse.ArgumentTypeError(f"expected aggregator=HOST or extender=HOST, got {text!r}")
    return component, host


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = (
        "Examples: 'carico certs --secret yaml | kubectl apply -f -' "
        "or 'carico certs --out ./pki' (files: ca.crt ca.key, aggregator/extender/agent .crt .key)."
    )
    out = parser.add_argument_group("output (at least one)")
    out.add_argument("--out", type=Path, metavar="DIR", help="write PEM files into DIR")
    out.add_argument(
        "--secret",
        choices=("yaml", "json"),
        help="print kubernetes.io/tls Secrets carico-<component>-tls (ca.crt, tls.crt, tls.key)",
    )
    out.add_argument("--force", action="store_true", help="overwrite existing files in --out")
    names = parser.add_argument_group("names")
    names.add_argument(
        "--namespace", default=DEFAULT_NAMESPACE, help="namespace (default: %(default)s)"
    )
    names.add_argument(
        "--cluster-domain",
        default=DEFAULT_CLUSTER_DOMAIN,
        help="cluster DNS domain (default: %(default)s)",
    )
    names.add_argument(
        "--aggregator-service",
        default=AGGREGATOR_SERVICE,
        help="aggregator Service name (default: %(default)s)",
    )
    names.add_argument(
        "--extender-service",
        default=EXTENDER_SERVICE,
        help="extender gRPC Service name (default: %(default)s)",
    )
    names.add_argument(
        "--extra-san",
        type=_extra,
        action="append",
        default=[],
        metavar="COMPONENT=HOST",
        help="another DNS name or IP for a server certificate, e.g. aggregator=agg.example.com "
        "(repeatable)",
    )
    valid = parser.add_argument_group("validity and CA")
    valid.add_argument(
        "--days",
        type=_positive,
        default=DEFAULT_DAYS,
        help="validity of the certificates (default: %(default)s)",
    )
    valid.add_argument(
        "--ca-days",
        type=_positive,
        default=DEFAULT_CA_DAYS,
        help="validity of a new CA (default: %(default)s)",
    )
    valid.add_argument("--ca-cert", type=Path, metavar="PATH", help="sign with this existing CA")
    valid.add_argument("--ca-key", type=Path, metavar="PATH", help="private key of --ca-cert")


def _fail(message: str) -> int:
    print(f"carico certs: {message}", file=sys.stderr)
    return 2


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from exc


def write_files(bundle: Bundle, directory: Path, *, with_ca_key: bool, force: bool) -> list[Path]:
    """Write the PEM files; refuse to replace any existing one unless ``force``."""
    names = ["ca", *bundle.leaves]
    targets = [directory / f"{name}.{ext}" for name in names for ext in ("crt", "key")]
    if not with_ca_key:
        targets.remove(directory / "ca.key")
    existing = [path for path in targets if path.exists()]
    if existing and not force:
        listed = ", ".join(str(path) for path in existing)
        raise ValueError(f"would overwrite {listed} (use --force)")
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    for path in existing:
        path.unlink()  # so a key file is created anew with mode 0600
    written: list[Path] = []
    ca_cert = directory / "ca.crt"
    ca_cert.write_bytes(bundle.ca.cert_pem)
    written.append(ca_cert)
    if with_ca_key:
        key = directory / "ca.key"
        key.touch(mode=0o600)
        key.write_bytes(bundle.ca.key_pem)
        written.append(key)
    for component, pair in bundle.leaves.items():
        written.extend(write_pair(pair, directory, component))
    return written


def run(args: argparse.Namespace) -> int:
    if args.out is None and args.secret is None:
        return _fail("say where to put the certificates: --out DIR and/or --secret yaml|json")
    if (args.ca_cert is None) != (args.ca_key is None):
        return _fail("--ca-cert and --ca-key go together")
    extra: dict[str, tuple[str, ...]] = {}
    for component, host in args.extra_san:
        extra[component] = (*extra.get(component, ()), host)
    try:
        leaves = plan(
            args.namespace,
            cluster_domain=args.cluster_domain,
            aggregator_service=args.aggregator_service,
            extender_service=args.extender_service,
            extra_hosts=extra,
        )
        ca = None
        if args.ca_cert is not None:
            ca = load_ca(_read(args.ca_cert), _read(args.ca_key))
        now = dt.datetime.now(dt.UTC)
        bundle = issue(leaves, now=now, days=args.days, ca_days=args.ca_days, ca=ca)
        # Render before writing anything, so a failure leaves nothing half-written.
        text = render(secret_manifests(bundle, args.namespace), args.secret) if args.secret else ""
        if args.out is not None:
            written = write_files(bundle, args.out, with_ca_key=ca is None, force=args.force)
            print(f"carico certs: wrote {len(written)} files to {args.out}", file=sys.stderr)
    except (ValueError, OSError) as exc:
        return _fail(str(exc))
    if text:
        sys.stdout.write(text)
    return 0
