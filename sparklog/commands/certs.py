"""``sparklog certs``: a local test CA and the broker's and clients' certificates, in PEM.

``sparklog certs create --dir DIR [--host H ...] [--client NAME ...] [--key-password PW]``
writes, with the ``cryptography`` package:

- ``ca.crt`` / ``ca.key``: a self-signed CA (the truststore of brokers and clients);
- ``broker.pem``: the broker's key and certificate chain in one file, Kafka's PEM keystore
  (``ssl.keystore.type=PEM``, ``ssl.keystore.location``), with ``broker.crt`` and
  ``broker.key`` beside it; its subject alternative names are every ``--host`` (DNS names
  and IP addresses; default ``localhost`` and ``127.0.0.1``), so clients verifying the
  host name (librdkafka's default) accept it;
- per ``--client NAME``: ``NAME.pem``, ``NAME.crt``, ``NAME.key``, subject ``CN=NAME``, for
  mutual TLS (the broker's principal for it is ``User:CN=NAME``).

Invariants:
- Keys are EC P-256; with ``--key-password`` they are encrypted (the broker then needs
  ``ssl.key.password``), else written in the clear. Key files are created mode 0600.
- Existing files are kept unless ``--force``: a second run refuses and names the first
  file it would replace. These certificates are for tests and development, not production.
- stdout: the broker settings to use them, as ``server.properties`` lines.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from sparklog.commands._client import ToolError, tool

Key = ec.EllipticCurvePrivateKey


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("certs", help="create a local test CA and TLS certificates")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = actions.add_parser("create", help="a CA, the broker's and clients' certificates")
    create.add_argument("--dir", type=Path, required=True, help="where to write the files")
    create.add_argument("--host", action="append", default=[], metavar="NAME_OR_IP",
                        help="a host name or IP address the broker is reached at "
                             "(repeatable; default localhost and 127.0.0.1)")
    create.add_argument("--client", action="append", default=[], metavar="NAME",
                        help="a client certificate with subject CN=NAME (repeatable)")
    create.add_argument("--key-password", help="encrypt the private keys with this password")
    create.add_argument("--days", type=int, default=365, help="validity (default 365 days)")
    create.add_argument("--force", action="store_true", help="replace existing files")
    create.set_defaults(func=tool("certs", create_certificates))


def create_certificates(args: argparse.Namespace) -> int:
    directory: Path = args.dir
    names = ["ca", "broker", *args.client]
    if not args.force:
        for name in names:
            for suffix in (".crt", ".key", ".pem"):
                if (directory / f"{name}{suffix}").exists():
                    raise ToolError(f"{directory / (name + suffix)} exists: use --force to "
                                    "replace the certificates")
    directory.mkdir(parents=True, exist_ok=True)
    days = datetime.timedelta(days=args.days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sparklog test CA")])
    ca = _certificate(ca_name, ca_key, ca_name, ca_key, days, ca=True)
    _write(directory, "ca", ca_key, [ca], args.key_password, pem=False)
    hosts = args.host or ["localhost", "127.0.0.1"]
    broker_key = ec.generate_private_key(ec.SECP256R1())
    broker = _certificate(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]),
                          broker_key, ca_name, ca_key, days, hosts=hosts)
    _write(directory, "broker", broker_key, [broker, ca], args.key_password)
    for client in args.client:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _certificate(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, client)]),
                            key, ca_name, ca_key, days, client=True)
        _write(directory, client, key, [cert, ca], args.key_password)
    where = directory.resolve()
    print(f"ssl.keystore.type=PEM\nssl.keystore.location={where / 'broker.pem'}")
    if args.key_password:
        print("ssl.key.password=<the --key-password>")
    print(f"ssl.truststore.type=PEM\nssl.truststore.location={where / 'ca.crt'}")
    return 0


def _certificate(subject: x509.Name, key: Key, issuer: x509.Name, issuer_key: Key,
                 days: datetime.timedelta, *, ca: bool = False, hosts: list[str] | None = None,
                 client: bool = False) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + days)
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if hosts:
        builder = builder.add_extension(x509.SubjectAlternativeName([_general_name(h)
                                                                     for h in hosts]),
                                        critical=False)
    if not ca:
        usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _write(directory: Path, name: str, key: Key, chain: list[x509.Certificate],
           password: str | None, pem: bool = True) -> None:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode()) if password
        else serialization.NoEncryption())
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                encryption)
    certs = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in chain)
    _write_private(directory / f"{name}.key", key_pem)
    (directory / f"{name}.crt").write_bytes(chain[0].public_bytes(serialization.Encoding.PEM))
    if pem:
        _write_private(directory / f"{name}.pem", key_pem + certs)


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
