"""carico certs: names, chains, key usages, Secret output and the command line's file handling."""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import json
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from carico.tls import make_ca
from carico_app import certs

# A fixed clock: validity windows are checked exactly.
NOW = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)


def _cert(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def _sans(cert: x509.Certificate) -> set[str]:
    ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    names = set(ext.get_values_for_type(x509.DNSName))
    return names | {str(ip) for ip in ext.get_values_for_type(x509.IPAddress)}


def _usages(cert: x509.Certificate) -> set[x509.ObjectIdentifier]:
    return set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


@pytest.fixture(scope="module")
def bundle() -> certs.Bundle:
    return certs.issue(certs.plan("team-a"), now=NOW, days=30, ca_days=90)


def test_plan_names_every_service_form_in_the_namespace() -> None:
    leaves = {leaf.component: leaf for leaf in certs.plan("team-a", cluster_domain="corp.local")}
    assert leaves["aggregator"].hosts == (
        "carico-aggregator",
        "carico-aggregator.team-a",
        "carico-aggregator.team-a.svc",
        "carico-aggregator.team-a.svc.corp.local",
    )
    assert set(leaves["extender"].hosts) == {
        "carico-extender",
        "carico-extender.team-a",
        "carico-extender.team-a.svc",
        "carico-extender.team-a.svc.corp.local",
        "localhost",
        "127.0.0.1",
        "::1",
    }
    assert leaves["agent"].hosts == ("carico-agent",) and not leaves["agent"].server


def test_certificates_chain_to_the_ca_with_the_planned_sans_and_usages(
    bundle: certs.Bundle,
) -> None:
    ca = _cert(bundle.ca.cert_pem)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert ca.not_valid_after_utc == NOW + dt.timedelta(days=90)
    want = {leaf.component: leaf for leaf in certs.plan("team-a")}
    assert set(bundle.leaves) == {"aggregator", "extender", "agent"}
    for component, pair in bundle.leaves.items():
        cert = _cert(pair.cert_pem)
        cert.verify_directly_issued_by(ca)  # raises if the CA did not sign it
        assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        assert cert.not_valid_after_utc == NOW + dt.timedelta(days=30)
        usages = _usages(cert)
        assert (ExtendedKeyUsageOID.CLIENT_AUTH in usages) == want[component].client
        assert (ExtendedKeyUsageOID.SERVER_AUTH in usages) == want[component].server
        assert _sans(cert) == set(want[component].hosts)
        # The key in the pair belongs to the certificate.
        key = serialization.load_pem_private_key(pair.key_pem, password=None)
        assert key.public_key() == cert.public_key()


def test_a_tls_verifier_accepts_the_service_names_and_nothing_else(bundle: certs.Bundle) -> None:
    store = Store([_cert(bundle.ca.cert_pem)])
    at = NOW + dt.timedelta(days=1)

    def verify_server(component: str, host: str) -> None:
        verifier = PolicyBuilder().store(store).time(at).build_server_verifier(x509.DNSName(host))
        verifier.verify(_cert(bundle.leaves[component].cert_pem), [])

    verify_server("aggregator", "carico-aggregator.team-a.svc")
    verify_server("extender", "carico-extender.team-a.svc.cluster.local")
    verify_server("extender", "localhost")
    for component, host in (
        ("aggregator", "carico-aggregator.other.svc"),  # another namespace
        ("aggregator", "carico-extender.team-a.svc"),  # another component
        ("agent", "carico-agent"),  # its own name, but a client-only certificate
    ):
        with pytest.raises(VerificationError):
            verify_server(component, host)
    client = PolicyBuilder().store(store).time(at).build_client_verifier()
    for component in ("agent", "extender", "aggregator"):
        client.verify(_cert(bundle.leaves[component].cert_pem), [])


def test_expired_certificates_fail_verification(bundle: certs.Bundle) -> None:
    store = Store([_cert(bundle.ca.cert_pem)])
    later = PolicyBuilder().store(store).time(NOW + dt.timedelta(days=31)).build_client_verifier()
    with pytest.raises(VerificationError):
        later.verify(_cert(bundle.leaves["agent"].cert_pem), [])


def test_secrets_parse_as_tls_secrets_without_the_ca_key(bundle: certs.Bundle) -> None:
    manifests = certs.secret_manifests(bundle, "team-a")
    for text, parse in (
        (certs.render(manifests, "yaml"), lambda t: list(yaml.safe_load_all(t))),
        (certs.render(manifests, "json"), lambda t: json.loads(t)["items"]),
    ):
        docs = parse(text)
        assert [d["metadata"]["name"] for d in docs] == [
            "carico-aggregator-tls",
            "carico-extender-tls",
            "carico-agent-tls",
        ]
        for doc in docs:
            assert doc["apiVersion"] == "v1" and doc["kind"] == "Secret"
            assert doc["type"] == "kubernetes.io/tls"
            assert doc["metadata"]["namespace"] == "team-a"
            data = {k: base64.b64decode(v, validate=True) for k, v in doc["data"].items()}
            assert set(data) == {"ca.crt", "tls.crt", "tls.key"}
            component = doc["metadata"]["labels"]["app.kubernetes.io/component"]
            assert data["ca.crt"] == bundle.ca.cert_pem
            assert data["tls.crt"] == bundle.leaves[component].cert_pem
            assert data["tls.key"] == bundle.leaves[component].key_pem
        assert base64.b64encode(bundle.ca.key_pem).decode() not in text
    assert json.loads(certs.render(manifests, "json"))["kind"] == "List"


def test_an_existing_ca_signs_and_must_outlive_the_certificates() -> None:
    ca = make_ca(now=NOW, valid_days=10)
    loaded = certs.load_ca(ca.cert_pem, ca.key_pem)
    signed = certs.issue(certs.plan(), now=NOW, days=5, ca=loaded)
    _cert(signed.leaves["agent"].cert_pem).verify_directly_issued_by(_cert(ca.cert_pem))
    assert signed.ca == ca
    with pytest.raises(ValueError, match="CA expires"):
        certs.issue(certs.plan(), now=NOW, days=11, ca=loaded)
    other = make_ca(now=NOW)
    with pytest.raises(ValueError, match="does not belong"):
        certs.load_ca(ca.cert_pem, other.key_pem)
    leaf = signed.leaves["agent"]
    with pytest.raises(ValueError, match="not a CA"):
        certs.load_ca(leaf.cert_pem, leaf.key_pem)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"namespace": "Team_A"}, "namespace"),
        ({"namespace": "a" * 64}, "namespace"),
        ({"aggregator_service": "agg.x"}, "aggregator service"),
        ({"cluster_domain": "bad domain"}, "cluster domain"),
        ({"extra_hosts": {"agent": ("x",)}}, "server certificates"),
        ({"extra_hosts": {"aggregator": ("bad host!",)}}, "neither"),
        ({"extra_hosts": {"aggregator": ("a*.example.com",)}}, "neither"),
        ({"extra_hosts": {"extender": ("x." * 130 + "com",)}}, "neither"),  # > 253 characters
    ],
)
def test_bad_names_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        certs.plan(**kwargs)  # type: ignore[arg-type]


def test_extra_sans_are_added_to_server_certificates() -> None:
    leaves = certs.plan(
        extra_hosts={"aggregator": ("agg.example.com", "10.0.0.7", "*.carico.example.com")}
    )
    bundle = certs.issue(leaves, now=NOW)
    assert {"agg.example.com", "10.0.0.7", "*.carico.example.com"} <= _sans(
        _cert(bundle.leaves["aggregator"].cert_pem)
    )


def test_the_ca_must_outlive_new_certificates_and_validity_is_positive() -> None:
    with pytest.raises(ValueError, match="outlive"):
        certs.issue(certs.plan(), now=NOW, days=400, ca_days=365)
    with pytest.raises(ValueError, match="at least one day"):
        certs.issue(certs.plan(), now=NOW, days=0)


# --- command line ------------------------------------------------------------------------------


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    certs.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_out_writes_private_files_and_refuses_to_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "pki"
    assert certs.run(_args("--out", str(out), "--namespace", "team-a")) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(
        f"{n}.{e}" for n in ("ca", "aggregator", "extender", "agent") for e in ("crt", "key")
    )
    for key in out.glob("*.key"):
        assert key.stat().st_mode & 0o777 == 0o600
    assert out.stat().st_mode & 0o777 == 0o700
    before = (out / "ca.key").read_bytes()
    assert certs.run(_args("--out", str(out))) == 2
    assert "would overwrite" in capsys.readouterr().err
    assert (out / "ca.key").read_bytes() == before  # nothing replaced
    (out / "agent.key").chmod(0o644)
    assert certs.run(_args("--out", str(out), "--force")) == 0
    assert (out / "ca.key").read_bytes() != before
    assert (out / "agent.key").stat().st_mode & 0o777 == 0o600


def test_secret_to_stdout_signed_by_a_given_ca(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ca = make_ca(now=dt.datetime.now(dt.UTC))
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    (tmp_path / "ca.key").write_bytes(ca.key_pem)
    code = certs.run(
        _args(
            "--secret",
            "yaml",
            "--namespace",
            "ops",
            "--days",
            "7",
            "--ca-cert",
            str(tmp_path / "ca.crt"),
            "--ca-key",
            str(tmp_path / "ca.key"),
        )
    )
    assert code == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert len(docs) == 3 and {d["metadata"]["namespace"] for d in docs} == {"ops"}
    for doc in docs:
        assert base64.b64decode(doc["data"]["ca.crt"]) == ca.cert_pem


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ((), "--out DIR and/or --secret"),
        (("--secret", "yaml", "--ca-cert", "x.crt"), "go together"),
        (("--secret", "yaml", "--ca-cert", "no.crt", "--ca-key", "no.key"), "cannot read"),
        (("--secret", "yaml", "--namespace", "NOPE"), "not a DNS label"),
        (("--secret", "yaml", "--days", "4000"), "outlive"),
    ],
)
def test_command_line_errors_exit_2_with_a_reason(
    argv: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert certs.run(_args(*argv)) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""


def test_bad_flag_values_are_rejected_by_the_parser() -> None:
    for argv in (("--days", "0"), ("--extra-san", "agent=x"), ("--secret", "xml")):
        with pytest.raises(SystemExit):
            _args(*argv)


def test_the_carico_command_dispatches_to_certs(capsys: pytest.CaptureFixture[str]) -> None:
    from carico_app import cli

    assert cli.main(["certs", "--secret", "json", "--namespace", "via-cli"]) == 0
    items = json.loads(capsys.readouterr().out)["items"]
    assert {item["metadata"]["namespace"] for item in items} == {"via-cli"}
