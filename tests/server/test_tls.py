"""HTTPS: `trainfleet server --tls-cert/--tls-key`, and clients that verify its certificate.

A private CA signs a certificate for 127.0.0.1 and localhost; the CLI and the SDK trust
it only when told (--ca-cert, TRAINFLEET_CA_CERT, ``ca_cert:`` in the config file,
``Client(ca_cert=...)``). A server started with unusable TLS files exits 2 with one line,
and one that listens beyond this machine without TLS warns that tokens travel in clear.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from helpers import trainfleet

from trainfleet.client import Client, Untrusted
from trainfleet.domain.errors import BadInput
from trainfleet.server.serve import is_loopback

from .harness import ServerProcess

TOKEN = "tls-tests-admin-token-long-enough"
CLEAR_WARNING = "without TLS: API tokens travel in clear"


@dataclass(frozen=True)
class Pki:
    """PEM files: a CA, a server certificate it signed, its key, and an unrelated key."""

    ca: Path
    cert: Path
    key: Path
    other_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> Path:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return path


def _certificate(
    subject: str, public: ec.EllipticCurvePublicKey, issuer: str, signer: ec.EllipticCurvePrivateKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()), False
        )
    )


def make_pki(folder: Path) -> Pki:
    """A CA and a server certificate for 127.0.0.1 and localhost, written under ``folder``."""
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = (
        _certificate("trainfleet test CA", ca_key.public_key(), "trainfleet test CA", ca_key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (
        _certificate("localhost", key.public_key(), "trainfleet test CA", ca_key)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    (folder / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Pki(
        ca=folder / "ca.pem",
        cert=folder / "cert.pem",
        key=_write_key(folder / "key.pem", key),
        other_key=_write_key(folder / "other-key.pem", ec.generate_private_key(ec.SECP256R1())),
    )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def https_server(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[ServerProcess]:
    process = ServerProcess(
        tmp_path_factory.mktemp("tls") / "data",
        {"TRAINFLEET_ADMIN_TOKEN": TOKEN},
        ["--tls-cert", str(pki.cert), "--tls-key", str(pki.key)],
    )
    yield process
    process.stop()


@pytest.fixture(autouse=True)
def no_outside_trust(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Only what a test gives is trusted: no CA or config file from the environment."""
    for name in ("SSL_CERT_FILE", "SSL_CERT_DIR", "TRAINFLEET_CA_CERT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def cli(*args: str | Path, server: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The real CLI against ``server`` with the admin token, and ``env``."""
    extra = {"TRAINFLEET_SERVER": server, "TRAINFLEET_TOKEN": TOKEN, **env}
    return subprocess.run(
        trainfleet(*args),
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **extra},
    )


def test_the_server_serves_https(https_server: ServerProcess) -> None:
    """--tls-cert and --tls-key: the server's URL is https://, and it warns of nothing."""
    assert https_server.url.startswith("https://127.0.0.1:")
    assert not [line for line in https_server.lines if CLEAR_WARNING in line]


@pytest.mark.parametrize("how", ["flag", "environment", "config file"])
def test_the_cli_trusts_the_ca_it_is_given(
    https_server: ServerProcess, pki: Pki, tmp_path: Path, how: str
) -> None:
    """`trainfleet list` over HTTPS works with the CA from --ca-cert, TRAINFLEET_CA_CERT or
    ``ca_cert:`` in the config file (a path relative to the file)."""
    args: list[str | Path] = ["list"]
    env: dict[str, str] = {}
    if how == "flag":
        args = ["--ca-cert", pki.ca, "list"]
    elif how == "environment":
        env["TRAINFLEET_CA_CERT"] = str(pki.ca)
    else:
        config = tmp_path / "config" / "trainfleet"
        config.mkdir(parents=True)
        (config / "ca.pem").write_bytes(pki.ca.read_bytes())
        (config / "config.yaml").write_text("ca_cert: ca.pem\n")
    done = cli(*args, server=https_server.url, **env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_the_cli_refuses_a_certificate_it_cannot_verify(https_server: ServerProcess) -> None:
    """Without the CA, the CLI stops with one line that says why and what to pass, exit 2
    (as for a server it cannot reach), and no traceback."""
    done = cli("list", server=https_server.url)
    assert done.returncode == 2
    assert done.stderr.startswith(
        f"error: cannot verify the server's certificate ({https_server.url}): "
    )
    assert done.stderr.endswith("; pass --ca-cert or set TRAINFLEET_CA_CERT\n")
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "env", "source"),
    [
        (["--ca-cert", "missing.pem"], {}, "--ca-cert"),
        ([], {"TRAINFLEET_CA_CERT": "missing.pem"}, "TRAINFLEET_CA_CERT"),
    ],
    ids=["flag", "environment"],
)
def test_the_cli_names_a_missing_ca_file(
    https_server: ServerProcess, args: list[str], env: dict[str, str], source: str
) -> None:
    """A CA file that is not there: exit 2 naming the option or variable that gave it."""
    done = cli(*args, "list", server=https_server.url, **env)
    assert done.returncode == 2
    assert done.stderr == (
        f"error: {source}: cannot load the CA certificate missing.pem: No such file or directory\n"
    )


def test_the_sdk_verifies_the_certificate(https_server: ServerProcess, pki: Pki) -> None:
    """``Client(ca_cert=...)`` talks to the server; without it the SDK raises Untrusted,
    which names the server and the reason; a CA file that is not there is BadInput."""
    with Client(https_server.url, TOKEN, ca_cert=pki.ca) as client:
        assert client.health()
        assert client.find().jobs == []
    with Client(https_server.url, TOKEN) as client, pytest.raises(Untrusted) as refused:
        client.find()
    assert str(refused.value).startswith(
        f"cannot verify the server's certificate ({https_server.url}): "
    )
    assert "certificate" in refused.value.reason
    with pytest.raises(BadInput, match="cannot load the CA certificate"):
        Client(https_server.url, TOKEN, ca_cert=pki.ca.parent / "missing.pem")


def test_a_client_given_nothing_finds_the_ca_as_a_notebook_has_it(
    https_server: ServerProcess, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Client()`` in a notebook: server, token and CA from the task's variables."""
    monkeypatch.setenv("TRAINFLEET_SERVER", https_server.url)
    monkeypatch.setenv("TRAINFLEET_TOKEN", TOKEN)
    monkeypatch.setenv("TRAINFLEET_CA_CERT", str(pki.ca))
    with Client() as client:
        assert client.whoami().user == "admin"


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"--tls-cert": "cert"}, "error: --tls-cert: give --tls-key too"),
        ({"TRAINFLEET_TLS_KEY": "key"}, "error: --tls-key: give --tls-cert too"),
        (
            {"--tls-cert": "missing", "--tls-key": "key"},
            "error: --tls-cert: cannot read {missing}: No such file or directory",
        ),
        (
            {"--tls-cert": "cert", "--tls-key": "other_key"},
            "error: --tls-key: {other_key} is not the key of the certificate {cert}",
        ),
        (
            {"--tls-cert": "key", "--tls-key": "key"},
            "error: --tls-cert: {key} holds no PEM certificate",
        ),
    ],
    ids=["cert-alone", "key-alone-from-environment", "missing-file", "other-key", "not-a-cert"],
)
def test_unusable_tls_files_stop_the_server_with_exit_code_2(
    pki: Pki, tmp_path: Path, files: dict[str, str], message: str
) -> None:
    """The server checks its certificate and key before it starts: one line naming the
    flag and the problem, exit code 2, no traceback."""
    paths = {"missing": str(tmp_path / "missing.pem")}
    paths |= {name: str(getattr(pki, name)) for name in ("cert", "key", "other_key")}
    args = [
        part
        for flag, name in files.items()
        if flag.startswith("--")
        for part in (flag, paths[name])
    ]
    env = {flag: paths[name] for flag, name in files.items() if not flag.startswith("--")}
    done = subprocess.run(
        trainfleet("--data-dir", tmp_path / "data", "server", "--port", "0", *args),
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(message.format(**paths)), done.stderr
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr
    assert not (tmp_path / "data").exists(), "checked before anything is opened"


@pytest.mark.parametrize(
    ("host", "tls", "warns"),
    [("0.0.0.0", False, True), ("0.0.0.0", True, False), ("127.0.0.1", False, False)],
    ids=["all-addresses", "all-addresses-tls", "loopback"],
)
def test_clear_http_beyond_this_machine_is_warned_about(
    pki: Pki, tmp_path: Path, host: str, tls: bool, warns: bool
) -> None:
    """Listening on a non-loopback address without TLS logs one warning at start, naming
    the address and the TLS flags; with TLS, or on loopback only, nothing is said."""
    args = ["--host", host]
    if tls:
        args += ["--tls-cert", str(pki.cert), "--tls-key", str(pki.key)]
    server = ServerProcess(tmp_path / "data", {"TRAINFLEET_ADMIN_TOKEN": TOKEN}, args)
    try:
        warnings = [line for line in server.lines if CLEAR_WARNING in line]
    finally:
        server.stop()
    if warns:
        assert len(warnings) == 1
        assert f"WARNING trainfleet.server listening on {host}:" in warnings[0]
        assert "--tls-cert and --tls-key" in warnings[0]
    else:
        assert warnings == []


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("localhost", True),
        ("::ffff:127.0.0.1", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.1.2.3", False),
        ("trainfleet.example.org", False),
    ],
)
def test_which_addresses_are_loopback(host: str, loopback: bool) -> None:
    """127.0.0.0/8, ::1 and localhost stay on this machine; everything else may not."""
    assert is_loopback(host) is loopback
