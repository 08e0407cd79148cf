"""Certificates and keys for the local control plane, generated in Python (no openssl CLI)."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = dt.timedelta(days=365)
_SERVER_DNS = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
_SERVER_IPS = ("127.0.0.1", "10.96.0.1")


@dataclass(frozen=True)
class PKIPaths:
    """Where each file of the control plane's PKI lives."""

    root: Path

    @property
    def ca_crt(self) -> Path:
        return self.root / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.root / "ca.key"

    @property
    def server_crt(self) -> Path:
        return self.root / "apiserver.crt"

    @property
    def server_key(self) -> Path:
        return self.root / "apiserver.key"

    @property
    def admin_crt(self) -> Path:
        return self.root / "admin.crt"

    @property
    def admin_key(self) -> Path:
        return self.root / "admin.key"

    @property
    def sa_key(self) -> Path:
        return self.root / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.root / "sa.pub"


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
    )


def _leaf(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_name: x509.Name,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    san: x509.SubjectAlternativeName | None = None,
) -> tuple[bytes, bytes]:
    key = _key()
    builder = _builder(subject, ca_name, key.public_key()).add_extension(
        x509.ExtendedKeyUsage([usage]), critical=False
    )
    if san is not None:
        builder = builder.add_extension(san, critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def generate(root: Path) -> PKIPaths:
    """Writes a CA, the apiserver serving pair, an admin client pair and SA signing keys."""
    paths = PKIPaths(root)
    root.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca_name = _name("rljob-dev-ca")
    ca = (
        _builder(ca_name, ca_name, ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
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
        .sign(ca_key, hashes.SHA256())
    )
    san = x509.SubjectAlternativeName(
        [x509.DNSName(n) for n in _SERVER_DNS]
        + [x509.IPAddress(ipaddress.ip_address(ip)) for ip in _SERVER_IPS]
    )
    server_crt, server_key = _leaf(
        ca_key, ca_name, _name("kube-apiserver"), ExtendedKeyUsageOID.SERVER_AUTH, san
    )
    admin_crt, admin_key = _leaf(
        ca_key, ca_name, _name("rljob-admin", "system:masters"), ExtendedKeyUsageOID.CLIENT_AUTH
    )
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    files = {
        paths.ca_crt: ca.public_bytes(serialization.Encoding.PEM),
        paths.ca_key: _pem_key(ca_key),
        paths.server_crt: server_crt,
        paths.server_key: server_key,
        paths.admin_crt: admin_crt,
        paths.admin_key: admin_key,
        paths.sa_key: _pem_key(sa_key),
        paths.sa_pub: sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    }
    for path, data in files.items():
        path.write_bytes(data)
        path.chmod(0o600)
    return paths


def serving_pair(paths: PKIPaths, common_name: str, crt: Path, key: Path) -> None:
    """A serving certificate for 127.0.0.1 signed by the bed's CA (a webhook the API server
    calls by URL trusts it through the configuration's caBundle, the CA)."""
    ca = x509.load_pem_x509_certificate(paths.ca_crt.read_bytes())
    ca_key = serialization.load_pem_private_key(paths.ca_key.read_bytes(), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError("the bed's CA key is not an EC key")
    san = x509.SubjectAlternativeName(
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    )
    cert, private = _leaf(
        ca_key, ca.subject, _name(common_name), ExtendedKeyUsageOID.SERVER_AUTH, san
    )
    crt.parent.mkdir(parents=True, exist_ok=True)
    key.parent.mkdir(parents=True, exist_ok=True)
    crt.write_bytes(cert)
    key.write_bytes(private)
    key.chmod(0o600)
