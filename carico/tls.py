"""TLS material and credentials shared by every component (docs/architecture.md#security).

Generates a small PKI (a CA, server and client certificates) with the ``cryptography`` package —
used by ``carico certs``, by the tests and by the demo — and turns certificate files into gRPC
credentials and ``ssl`` contexts. mTLS means: the server presents its certificate and requires a
client certificate signed by the configured client CA.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_VALID_DAYS = 365


@dataclass(frozen=True)
class KeyPair:
    """A PEM certificate and its PEM (PKCS#8, unencrypted) private key."""

    cert_pem: bytes
    key_pem: bytes


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def make_ca(
    common_name: str = "carico-ca", *, now: dt.datetime, valid_days: int = DEFAULT_VALID_DAYS
) -> KeyPair:
    """A self-signed CA certificate valid from ``now`` (minus a minute of clock skew)."""
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(days=valid_days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def make_leaf(
    ca: KeyPair,
    common_name: str,
    *,
    now: dt.datetime,
    hosts: tuple[str, ...] = (),
    server: bool = True,
    client: bool = True,
    valid_days: int = DEFAULT_VALID_DAYS,
) -> KeyPair:
    """A certificate signed by ``ca`` for ``hosts`` (DNS names or IP addresses)."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key must be an EC key made by make_ca")
    key = ec.generate_private_key(ec.SECP256R1())
    alt_names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            alt_names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            alt_names.append(x509.DNSName(host))
    usages = [
        *([ExtendedKeyUsageOID.SERVER_AUTH] if server else []),
        *([ExtendedKeyUsageOID.CLIENT_AUTH] if client else []),
    ]
    if not usages:
        raise ValueError("a certificate must be usable by a server, a client or both")
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(days=valid_days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        # RFC 5280 requires the key identifiers; strict verifiers reject certificates without them.
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if alt_names:
        builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def write_pair(pair: KeyPair, directory: Path, name: str) -> tuple[Path, Path]:
    """Write ``name.crt`` and ``name.key`` (mode 0600) into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
    cert_path.write_bytes(pair.cert_pem)
    key_path.touch(mode=0o600)
    key_path.write_bytes(pair.key_pem)
    return cert_path, key_path


def _read(path: str | Path) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read TLS file {path}: {exc.strerror}") from exc


def grpc_server_credentials(
    cert_file: str | Path, key_file: str | Path, client_ca_file: str | Path | None = None
) -> grpc.ServerCredentials:
    """Server credentials; with ``client_ca_file`` clients must present a certificate it signed."""
    return grpc.ssl_server_credentials(
        [(_read(key_file), _read(cert_file))],
        root_certificates=_read(client_ca_file) if client_ca_file else None,
        require_client_auth=client_ca_file is not None,
    )


def grpc_channel_credentials(
    ca_file: str | Path,
    cert_file: str | Path | None = None,
    key_file: str | Path | None = None,
) -> grpc.ChannelCredentials:
    """Channel credentials trusting ``ca_file``; with cert and key, the client authenticates too."""
    if (cert_file is None) != (key_file is None):
        raise ValueError("a client certificate needs both --tls-cert and --tls-key")
    return grpc.ssl_channel_credentials(
        root_certificates=_read(ca_file),
        private_key=_read(key_file) if key_file else None,
        certificate_chain=_read(cert_file) if cert_file else None,
    )


def server_ssl_context(
    cert_file: str | Path, key_file: str | Path, client_ca_file: str | Path | None = None
) -> ssl.SSLContext:
    """An HTTPS server context; with ``client_ca_file`` client certificates are required."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(str(cert_file), str(key_file))
        if client_ca_file:
            context.load_verify_locations(str(client_ca_file))
            context.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"cannot load TLS certificate {cert_file} / {key_file}: {exc}") from exc
    return context
