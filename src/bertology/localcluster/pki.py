"""The local cluster's certificates: one CA, and a key pair for each identity, as hack/local-up-cluster.sh
makes them (kube::util::create_client_certkey): a client certificate's CN is the user and its O the groups
that Kubernetes' x509 authenticator reads; the API server's and the kubelet's serving certificates name
every address they are reached at. Plus the service account signing key pair.
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

VALID_DAYS = 365


@dataclass(frozen=True)
class Identity:
    """A key pair to issue: `name` names its files (NAME.crt, NAME.key)."""

    name: str
    common_name: str
    groups: tuple[str, ...] = ()
    client: bool = True
    server: bool = False
    hosts: tuple[str, ...] = ()  # DNS names and IP addresses, for a serving certificate


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


def _name(common_name: str, groups: tuple[str, ...] = ()) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name),
                      *(x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups)])


def _san(hosts: tuple[str, ...]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def create_ca(directory: Path) -> None:
    """ca.crt and ca.key: the one authority every component trusts, for clients and servers alike."""
    key = _key()
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name("bertology-local-ca")).issuer_name(_name("bertology-local-ca"))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    _write_key(directory / "ca.key", key)
    (directory / "ca.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def issue(directory: Path, identity: Identity) -> None:
    """NAME.crt and NAME.key for `identity`, signed by the CA in `directory`."""
    ca_key = serialization.load_pem_private_key((directory / "ca.key").read_bytes(), password=None)
    ca_cert = x509.load_pem_x509_certificate((directory / "ca.crt").read_bytes())
    key = _key()
    now = datetime.datetime.now(datetime.timezone.utc)
    usages = ([ExtendedKeyUsageOID.CLIENT_AUTH] if identity.client else []) + (
        [ExtendedKeyUsageOID.SERVER_AUTH] if identity.server else [])
    builder = (x509.CertificateBuilder().subject_name(_name(identity.common_name, identity.groups))
               .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage(usages), critical=False))
    if identity.hosts:
        builder = builder.add_extension(_san(identity.hosts), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    _write_key(directory / f"{identity.name}.key", key)
    (directory / f"{identity.name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def create_service_account_keys(directory: Path) -> None:
    """service-account.key (the API server signs tokens with it) and service-account.pub."""
    key = _key()
    _write_key(directory / "service-account.key", key)
    (directory / "service-account.pub").write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))


def create_all(directory: Path, identities: list[Identity]) -> None:
    """A fresh CA, every identity's key pair and the service account keys, in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    create_ca(directory)
    for identity in identities:
        issue(directory, identity)
    create_service_account_keys(directory)
