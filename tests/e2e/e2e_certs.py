"""Throw-away PKI for the e2e control plane: a CA, one loopback serving certificate, SA keys.

Everything is written into a temporary directory owned by the control plane fixture
(e2e_controlplane.py) and dies with it. The CA and the serving pair come from ``carico.tls``, the
same code that makes the components' certificates; keys are EC P-256: fast to generate on a loaded
machine and accepted by every component (kube-apiserver signs service-account tokens with ES256).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from carico.tls import make_ca, make_leaf, write_pair

API_SERVER_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
    "127.0.0.1",
)


@dataclass(frozen=True)
class CertPaths:
    ca_crt: Path
    serving_crt: Path
    serving_key: Path
    sa_key: Path  # private: kube-apiserver signs tokens, kube-controller-manager mints them
    sa_pub: Path  # public: kube-apiserver verifies tokens


def write_pki(directory: Path, service_ip: str = "10.0.0.1") -> CertPaths:
    """Write the CA, the serving pair (valid for 127.0.0.1, localhost, the kubernetes service
    names and ``service_ip``) and the service-account pair into ``directory``."""
    now = datetime.datetime.now(datetime.UTC)
    ca = make_ca("carico-e2e-ca", now=now, valid_days=2)
    serving = make_leaf(
        ca,
        "carico-e2e-serving",
        now=now,
        hosts=(*API_SERVER_NAMES, service_ip),
        client=False,
        valid_days=2,
    )
    ca_crt, _ = write_pair(ca, directory, "ca")
    serving_crt, serving_key = write_pair(serving, directory, "serving")
    sa_key = ec.generate_private_key(ec.SECP256R1())
    sa_key_path, sa_pub_path = directory / "sa.key", directory / "sa.pub"
    sa_key_path.touch(mode=0o600)
    sa_key_path.write_bytes(
        sa_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    sa_pub_path.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return CertPaths(ca_crt, serving_crt, serving_key, sa_key_path, sa_pub_path)
