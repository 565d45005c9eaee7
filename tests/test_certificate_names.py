"""minibroker/security/certificates.py: the subject and subject alternative names read from DER with the
standard library, checked against the cryptography package's parser on certificates made by the
openssl command, by ``minibroker certs`` and by cryptography from random name lists; and malformed
bytes give ValueError, never another exception."""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from hypothesis import given, settings
from hypothesis import strategies as st

from minibroker.security.certificates import (
    certificate_alt_names,
    certificate_subject,
    pem_certificates,
    rfc2253_name,
)
from minibroker.tools.certs import generate_test_certs

_KEY = ec.generate_private_key(ec.SECP256R1())


def _expected(cert: x509.Certificate) -> set[tuple[str, str]]:
    """The subject alternative names as cryptography parses them, in the reader's (type, value) form."""
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    out = set()
    for name in names:
        if isinstance(name, x509.DNSName):
            out.add(("DNS", name.value))
        elif isinstance(name, x509.RFC822Name):
            out.add(("email", name.value))
        elif isinstance(name, x509.UniformResourceIdentifier):
            out.add(("URI", name.value))
        elif isinstance(name, x509.IPAddress):
            out.add(("IP", str(name.value)))
        elif isinstance(name, x509.RegisteredID):
            out.add(("RID", name.value.dotted_string))
        elif isinstance(name, x509.DirectoryName):
            out.add(("DirName", rfc2253_name(name.value.public_bytes())))
        elif isinstance(name, x509.OtherName):  # [0] { type-id OID, [0] EXPLICIT value }
            oid = x509.ObjectIdentifier(name.type_id.dotted_string)
            body = _tlv(0x06, _oid_body(oid.dotted_string)) + _tlv(0xA0, name.value)
            out.add(("othername", _tlv(0xA0, body).hex()))
    return out


def _tlv(tag: int, body: bytes) -> bytes:
    n = len(body)
    length = bytes([n]) if n < 0x80 else bytes([0x80 | ((n.bit_length() + 7) // 8)]) + n.to_bytes(
        (n.bit_length() + 7) // 8, "big")
    return bytes([tag]) + length + body


def _oid_body(dotted: str) -> bytes:
    parts = [int(p) for p in dotted.split(".")]
    out = b""
    for value in [parts[0] * 40 + parts[1], *parts[2:]]:
        chunk = [value & 0x7F]
        value >>= 7
        while value:
            chunk.append(0x80 | (value & 0x7F))
            value >>= 7
        out += bytes(reversed(chunk))
    return out


def _der(pem_path) -> bytes:
    cert = x509.load_pem_x509_certificate(Path(pem_path).read_bytes())
    return cert.public_bytes(serialization.Encoding.DER)


@pytest.fixture(scope="module")
def openssl_cert(tmp_path_factory) -> bytes:
    """A certificate from the openssl command with every kind of subject alternative name it writes."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no openssl command")
    d = tmp_path_factory.mktemp("openssl")
    (d / "extra.cnf").write_text("[req]\ndistinguished_name=dn\n[dn]\n[dir_sect]\nCN=dir name\nO=org, inc\n")
    sans = ("DNS:a.example,DNS:*.b.example,IP:10.0.0.1,IP:::1,IP:2001:db8::8:800:200c:417a,email:a@b.example,"
            "URI:https://c.example/p?q=1,RID:1.2.3.4.5,dirName:dir_sect,otherName:1.3.6.1.4.1.311.20.2.3;"
            "UTF8:upn@example")
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(d / "k.pem"),
                    "-out", str(d / "c.pem"), "-days", "2", "-config", str(d / "extra.cnf"),
                    "-subj", "/C=DE/ST=Berlin/O=Example, Inc./OU=brokers/CN=broker one",
                    "-addext", f"subjectAltName={sans}", "-addext", "basicConstraints=critical,CA:FALSE"],
                   check=True, capture_output=True)
    return _der(d / "c.pem")


def test_an_openssl_certificate_reads_as_cryptography_reads_it(openssl_cert):
    cert = x509.load_der_x509_certificate(openssl_cert)
    names = certificate_alt_names(openssl_cert)
    assert names == _expected(cert)
    assert {kind for kind, _ in names} == {"DNS", "IP", "email", "URI", "RID", "DirName", "othername"}
    (directory,) = [n for n in cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
                    if isinstance(n, x509.DirectoryName)]
    assert ("DirName", directory.value.rfc4514_string()) in names  # the same form as Java's, here
    assert ("IP", "::1") in names and ("IP", "2001:db8::8:800:200c:417a") in names
    assert certificate_subject(openssl_cert) == cert.subject.rfc4514_string()
    assert certificate_subject(openssl_cert) == "CN=broker one,OU=brokers,O=Example\\, Inc.,ST=Berlin,C=DE"


def test_minibroker_certs_read_as_cryptography_reads_them(tmp_path):
    paths = generate_test_certs(str(tmp_path), hosts=["broker.example", "192.0.2.7"])
    broker = _der(paths["broker_cert"])
    assert certificate_alt_names(broker) == {("DNS", "localhost"), ("IP", "127.0.0.1"), ("IP", "::1"),
                                             ("DNS", "broker.example"), ("IP", "192.0.2.7")}
    assert certificate_alt_names(broker) == _expected(x509.load_der_x509_certificate(broker))
    assert certificate_subject(broker) == "CN=broker.example,OU=broker,O=minibroker"
    assert certificate_alt_names(_der(paths["client_cert"])) == set()  # no extension
    # a key store: the key block is skipped, the chain read in order (served certificate, then the CA)
    chain = pem_certificates(Path(paths["broker_keystore"]).read_bytes())
    assert chain == [broker, _der(paths["ca"])]


_dns = st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?(\.[a-z]{2,6}){1,2}\Z")
_general_names = st.one_of(
    _dns.map(x509.DNSName),
    st.ip_addresses().map(x509.IPAddress),
    _dns.map(lambda d: x509.RFC822Name(f"user@{d}")),
    _dns.map(lambda d: x509.UniformResourceIdentifier(f"https://{d}/x")),
    st.lists(st.integers(0, 2**40), min_size=1, max_size=4).map(
        lambda tail: x509.RegisteredID(x509.ObjectIdentifier("1.3." + ".".join(map(str, tail))))),
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=20).map(
        lambda cn: x509.DirectoryName(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))),
    st.binary(max_size=40).map(lambda b: x509.OtherName(x509.ObjectIdentifier("1.2.3.4"), _tlv(0x04, b))),
)


def _certificate(names: list, cn: str = "x") -> bytes:
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
               .public_key(_KEY.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True))
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(_KEY, hashes.SHA256()).public_bytes(serialization.Encoding.DER)


@settings(max_examples=60, deadline=None)
@given(st.lists(_general_names, max_size=8, unique_by=str))
def test_random_alternative_names_read_as_cryptography_reads_them(names):
    der = _certificate(names)
    expected = _expected(x509.load_der_x509_certificate(der))
    assert certificate_alt_names(der) == expected
    ips = {str(ipaddress.ip_address(n.value)) for n in names if isinstance(n, x509.IPAddress)}
    assert {value for kind, value in expected if kind == "IP"} == ips


_SOUND = _certificate([x509.DNSName("a.example"), x509.IPAddress(ipaddress.ip_address("::1"))], "c")


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_malformed_certificates_raise_value_error_only(data):
    der = _SOUND
    cut = data.draw(st.integers(0, len(der)))
    flips = data.draw(st.lists(st.tuples(st.integers(0, len(der) - 1), st.integers(0, 255)), max_size=3))
    mangled = bytearray(der[:cut] if data.draw(st.booleans()) else der)
    for position, value in flips:
        if position < len(mangled):
            mangled[position] = value
    for read in (certificate_subject, certificate_alt_names):
        try:
            read(bytes(mangled))
        except ValueError:
            pass


def test_pem_text_that_is_not_a_certificate_is_refused():
    assert pem_certificates(b"no blocks here") == []
    with pytest.raises(ValueError, match="certificate 1 cannot be read"):
        pem_certificates(b"-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n")
    with pytest.raises(ValueError, match="certificate 1 cannot be read"):
        pem_certificates(b"-----BEGIN CERTIFICATE-----\nMAMCAQE=\n-----END CERTIFICATE-----\n")  # INTEGER 1
