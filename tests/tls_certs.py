"""Throwaway TLS certificates for tests, made at test time (none is committed).

``make_certs(dir)`` writes a CA, a server certificate for 127.0.0.1/localhost
and a client certificate (both signed by the CA), and a second, unrelated CA
(the "wrong" CA), with the ``openssl`` binary, else the ``cryptography``
package. The ``tls_certs`` fixture makes them once per test session and skips
(saying why) only when neither tool exists.
"""

from __future__ import annotations

import datetime
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Certs:
    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    wrong_ca: str


def _paths(d: Path) -> Certs:
    return Certs(ca=str(d / "ca.pem"), server_cert=str(d / "server.pem"),
                 server_key=str(d / "server.key"), client_cert=str(d / "client.pem"),
                 client_key=str(d / "client.key"), wrong_ca=str(d / "wrong-ca.pem"))


def _run(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _with_openssl(d: Path) -> Certs:
    for name in ("ca", "wrong-ca"):
        _run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-subj", f"/CN=test {name}", "-keyout", f"{name}.key", "-out", f"{name}.pem",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                  "extendedKeyUsage=serverAuth\n")
    (d / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for name in ("server", "client"):
        _run("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN=test {name}",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)
        _run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext",
             "-out", f"{name}.pem", cwd=d)
    return _paths(d)


def _with_cryptography(d: Path) -> Certs:  # pragma: no cover - used only without openssl
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)

    def key_pem(key: rsa.RSAPrivateKey) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM,
                                 serialization.PrivateFormat.TraditionalOpenSSL,
                                 serialization.NoEncryption())

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def ca(cn: str) -> tuple[rsa.RSAPrivateKey, x509.Certificate]:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        cert = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(name(cn))
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(hours=1))
                .not_valid_after(now + datetime.timedelta(days=2))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .sign(key, hashes.SHA256()))
        return key, cert

    ca_key, ca_cert = ca("test ca")
    _, wrong = ca("test wrong-ca")
    (d / "ca.pem").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    (d / "wrong-ca.pem").write_bytes(wrong.public_bytes(serialization.Encoding.PEM))
    for leaf, usage in (("server", ExtendedKeyUsageOID.SERVER_AUTH),
                        ("client", ExtendedKeyUsageOID.CLIENT_AUTH)):
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        builder = (x509.CertificateBuilder().subject_name(name(f"test {leaf}"))
                   .issuer_name(ca_cert.subject).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(hours=1))
                   .not_valid_after(now + datetime.timedelta(days=2))
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if leaf == "server":
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
                critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        (d / f"{leaf}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        (d / f"{leaf}.key").write_bytes(key_pem(key))
    return _paths(d)


def make_certs(d: Path) -> Certs | None:
    """Certificates in ``d``; None when neither openssl nor cryptography exists."""
    d.mkdir(parents=True, exist_ok=True)
    if shutil.which("openssl"):
        return _with_openssl(d)
    try:
        import cryptography  # noqa: F401
    except ImportError:
        return None
    return _with_cryptography(d)


@pytest.fixture(scope="session", name="tls_certs")
def tls_certs_fixture(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    certs = make_certs(tmp_path_factory.mktemp("tls"))
    if certs is None:
        pytest.skip("no openssl binary and no cryptography package to make test certificates")
    return certs
