"""Throw-away PKI for the e2e control plane: a CA, one loopback serving certificate, SA keys.

Everything is written into a temporary directory owned by the control plane fixture
(e2e_controlplane.py) and dies with it. Keys are EC P-256: fast to generate on a loaded machine and
accepted by every component (kube-apiserver signs service-account tokens with ES256 for EC keys).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class CertPaths:
    ca_crt: Path
    serving_crt: Path
    serving_key: Path
    sa_key: Path  # private: kube-apiserver signs tokens, kube-controller-manager mints them
    sa_pub: Path  # public: kube-apiserver verifies tokens


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def write_pki(directory: Path, service_ip: str = "10.0.0.1") -> CertPaths:
    """Write the CA, the serving pair (valid for 127.0.0.1, localhost, the kubernetes service
    names and ``service_ip``) and the service-account pair into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    # Backdated a little: the components compare against their own clocks.
    not_before, not_after = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=2)

    ca_key = _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "carico-e2e-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )

    serving_key = _key()
    names: list[x509.GeneralName] = [
        x509.DNSName(n)
        for n in (
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        )
    ]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ("127.0.0.1", service_ip)]
    serving = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "carico-e2e-serving")]))
        .issuer_name(ca_name)
        .public_key(serving_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )

    paths = CertPaths(
        ca_crt=directory / "ca.crt",
        serving_crt=directory / "serving.crt",
        serving_key=directory / "serving.key",
        sa_key=directory / "sa.key",
        sa_pub=directory / "sa.pub",
    )
    paths.ca_crt.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths.serving_crt.write_bytes(serving.public_bytes(serialization.Encoding.PEM))
    _write_key(paths.serving_key, serving_key)
    sa_key = _key()
    _write_key(paths.sa_key, sa_key)
    paths.sa_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return paths
