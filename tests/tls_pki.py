"""Test certificates, made with Python's `cryptography`: a CA, leaves it signs (ECDSA P-256 or
RSA 2048), client certificates, and the broken files `ringx check` must name (an expired
certificate, a key of another certificate, a chain out of order)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID


def _key(kind: str):
    if kind == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(k) -> bytes:
    return k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                           serialization.NoEncryption())


def _pem(c) -> bytes:
    return c.public_bytes(serialization.Encoding.PEM)


class Pki:
    def __init__(self, dir: Path, name: str = "ringx test CA"):
        self.dir = Path(dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ca_key = _key("ec")
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = dt.datetime.now(dt.timezone.utc)
        self.ca = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                   .public_key(self.ca_key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - dt.timedelta(days=1))
                   .not_valid_after(now + dt.timedelta(days=365))
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                   .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False),
                                  critical=True)
                   .sign(self.ca_key, hashes.SHA256()))
        self.ca_path = self.dir / f"{name.replace(' ', '_')}.pem"
        self.ca_path.write_bytes(_pem(self.ca))

    def leaf(self, file: str, names: list[str], kind: str = "ec", days: tuple[int, int] = (-1, 30),
             client: bool = False, cn: str | None = None,
             crl: str | None = None) -> tuple[Path, Path]:
        """Writes FILE.pem (the leaf, then the CA) and FILE.key; returns both paths. `crl`: a
        CRL distribution point URL to name in the leaf (nothing serves it)."""
        key = _key(kind)
        now = dt.datetime.now(dt.timezone.utc)
        b = (x509.CertificateBuilder()
             .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn or names[0])]))
             .issuer_name(self.ca.subject).public_key(key.public_key())
             .serial_number(x509.random_serial_number())
             .not_valid_before(now + dt.timedelta(days=days[0]))
             .not_valid_after(now + dt.timedelta(days=days[1])))
        if client:
            b = b.add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]),
                                critical=False)
        else:
            b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]),
                                critical=False)
        if crl:
            b = b.add_extension(x509.CRLDistributionPoints([x509.DistributionPoint(
                [x509.UniformResourceIdentifier(crl)], None, None, None)]), critical=False)
        cert = b.sign(self.ca_key, hashes.SHA256())
        c, k = self.dir / f"{file}.pem", self.dir / f"{file}.key"
        c.write_bytes(_pem(cert) + _pem(self.ca))
        k.write_bytes(_pem_key(key))
        return c, k

    def swapped(self, cert: Path) -> Path:
        """The same chain with the CA first: out of order."""
        pems = cert.read_bytes().split(b"-----END CERTIFICATE-----\n")
        out = cert.with_name(cert.stem + "-swapped.pem")
        out.write_bytes(pems[1] + b"-----END CERTIFICATE-----\n" + pems[0] + b"-----END CERTIFICATE-----\n")
        return out
