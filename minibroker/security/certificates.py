"""What an X.509 certificate says, read from its DER bytes with the standard library only: the subject
as Java's ``X500Principal.getName()`` prints it (what Kafka's principal mapping rules see) and the
subject alternative names (what Kafka checks when a listener's key store changes at run time), plus
the certificates of PEM text.

A reader of the few fields these need, not a validator: OpenSSL verifies certificates when it loads
and uses them. Malformed input raises ``ValueError``, nothing else.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re

_PEM_CERTIFICATE_RE = re.compile(rb"-----BEGIN CERTIFICATE-----(.*?)-----END CERTIFICATE-----", re.DOTALL)

# Attribute types RFC 2253 gives a keyword; any other is printed as its dotted OID with the value as
# '#' and the hex of its DER encoding, as Java does.
_RFC2253_KEYWORDS = {
    "2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O", "2.5.4.11": "OU",
    "2.5.4.9": "STREET", "0.9.2342.19200300.100.1.25": "DC", "0.9.2342.19200300.100.1.1": "UID",
}
# Java's DER string types (non-canonical): UTF8String, PrintableString, T61String, IA5String,
# GeneralString, BMPString; other value types are printed in hex.
_STRING_TAGS = {0x0C: "utf-8", 0x13: "utf-8", 0x14: "latin-1", 0x16: "utf-8", 0x1B: "latin-1",
                0x1E: "utf-16-be"}
_RFC2253_ESCAPED = ',=+<>#;"\\'

_SEQUENCE, _SET, _OID, _OCTET_STRING, _BOOLEAN = 0x30, 0x31, 0x06, 0x04, 0x01
_EXTENSIONS = 0xA3  # [3] EXPLICIT in TBSCertificate
_SUBJECT_ALT_NAME = "2.5.29.17"
# GeneralName (RFC 5280 4.2.1.6): context tag number -> the label OpenSSL prints for it.
_GENERAL_NAME_LABELS = {0: "othername", 1: "email", 2: "DNS", 3: "X400Name", 4: "DirName",
                        5: "EdiPartyName", 6: "URI", 7: "IP", 8: "RID"}


def _der_items(data: bytes, pos: int = 0, end: int | None = None):
    """(tag, start of contents, end of contents, start of the item) for each DER item in
    ``data[pos:end]``. Raises ValueError on a truncated item or a form certificates do not use."""
    end = len(data) if end is None else end
    while pos < end:
        start = pos
        if pos + 2 > end:
            raise ValueError("truncated DER item")
        tag, length = data[pos], data[pos + 1]
        if tag & 0x1F == 0x1F:
            raise ValueError("multi-byte DER tag")
        pos += 2
        if length & 0x80:
            count = length & 0x7F
            if count == 0 or count > 4 or pos + count > end:
                raise ValueError("bad DER length")
            length = int.from_bytes(data[pos:pos + count], "big")
            pos += count
        if pos + length > end:
            raise ValueError("truncated DER item")
        yield tag, pos, pos + length, start
        pos += length


def _only_item(data: bytes, tag: int, what: str) -> tuple[int, int]:
    """(start, end) of the contents of ``data``, one DER item with ``tag``."""
    items = list(_der_items(data))
    if len(items) != 1 or items[0][0] != tag:
        raise ValueError(f"not a DER {what}")
    return items[0][1], items[0][2]


def _oid_text(body: bytes) -> str:
    parts: list[int] = []
    value = 0
    for byte in body:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            parts.append(value)
            value = 0
    if not parts:
        return ""
    first = parts[0]
    head = [min(first // 40, 2), first - 40 * min(first // 40, 2)]
    return ".".join(str(p) for p in head + parts[1:])


def _escape_rfc2253(text: str) -> str:
    out = []
    for c in text:
        if c in _RFC2253_ESCAPED:
            out.append("\\" + c)
        elif c == "\0":
            out.append("\\00")
        else:
            out.append(c)
    chars = "".join(out)
    lead = len(chars) - len(chars.lstrip(" \r"))
    trail = len(chars.rstrip(" \r"))
    return "".join("\\" + c if i < lead or i >= trail else c for i, c in enumerate(chars))


def rfc2253_name(name_der: bytes) -> str:
    """A DER-encoded X.501 Name as Java's ``X500Principal.getName()`` prints it: the last RDN first,
    RDNs joined by ``,`` and multi-valued ones by ``+``, RFC 2253 keywords (CN, OU, O, L, ST, C,
    STREET, DC, UID), other types as OID=#hex, special characters escaped with a backslash."""
    start, end = _only_item(name_der, _SEQUENCE, "Name")
    rdns = []
    for set_tag, set_start, set_end, _ in _der_items(name_der, start, end):
        if set_tag != _SET:
            raise ValueError("RDN is not a SET")
        avas = []
        for seq_tag, seq_start, seq_end, _ in _der_items(name_der, set_start, set_end):
            if seq_tag != _SEQUENCE:
                raise ValueError("attribute is not a SEQUENCE")
            parts = list(_der_items(name_der, seq_start, seq_end))
            if len(parts) != 2 or parts[0][0] != _OID:
                raise ValueError("attribute is not a type and a value")
            (_, oid_start, oid_end, _), (value_tag, value_start, value_end, value_item) = parts
            oid = _oid_text(name_der[oid_start:oid_end])
            keyword = _RFC2253_KEYWORDS.get(oid)
            encoding = _STRING_TAGS.get(value_tag)
            if keyword is None or encoding is None:
                avas.append(f"{keyword or oid}=#{name_der[value_item:value_end].hex()}")
            else:
                value = name_der[value_start:value_end].decode(encoding, "replace")
                avas.append(f"{keyword}={_escape_rfc2253(value)}")
        rdns.append("+".join(avas))
    return ",".join(reversed(rdns))


def _tbs_fields(cert_der: bytes) -> list[tuple[int, int, int, int]]:
    """The items of a certificate's TBSCertificate from serialNumber on (the [0] version dropped):
    serialNumber, signature, issuer, validity, subject, subjectPublicKeyInfo, then the optional
    [1] issuerUniqueID, [2] subjectUniqueID and [3] extensions."""
    cert_start, cert_end = _only_item(cert_der, _SEQUENCE, "certificate")
    parts = list(_der_items(cert_der, cert_start, cert_end))
    if len(parts) != 3 or parts[0][0] != _SEQUENCE:
        raise ValueError("not a DER certificate")
    _, tbs_start, tbs_end, _ = parts[0]
    fields = list(_der_items(cert_der, tbs_start, tbs_end))
    if fields and fields[0][0] == 0xA0:  # [0] version
        fields = fields[1:]
    if len(fields) < 6 or fields[4][0] != _SEQUENCE:
        raise ValueError("not a DER certificate")
    return fields


def certificate_subject(cert_der: bytes) -> str:
    """The subject of a DER certificate in Java's RFC 2253 form (see ``rfc2253_name``)."""
    _, _, subject_end, subject_item = _tbs_fields(cert_der)[4]
    return rfc2253_name(cert_der[subject_item:subject_end])


def _general_name(der: bytes, tag: int, start: int, end: int, item: int) -> tuple[str, str]:
    number = tag & 0x1F
    label = _GENERAL_NAME_LABELS.get(number, f"[{number}]")
    body = der[start:end]
    if number in (1, 2, 6):  # rfc822Name, dNSName, uniformResourceIdentifier: IA5String
        return label, body.decode("ascii", "backslashreplace")
    if number == 7 and len(body) in (4, 16):  # iPAddress: the address in network order
        return label, str(ipaddress.ip_address(body))
    if number == 4:  # directoryName: [4] EXPLICIT Name
        return label, rfc2253_name(body)
    if number == 8:  # registeredID: [8] IMPLICIT OBJECT IDENTIFIER
        return label, _oid_text(body)
    return label, der[item:end].hex()  # otherName, x400Address, ediPartyName: their DER


def certificate_alt_names(cert_der: bytes) -> set[tuple[str, str]]:
    """The subject alternative names of a DER certificate as (type, value) pairs, with OpenSSL's type
    labels: ``("DNS", "localhost")``, ``("IP", "::1")``, ``("email", ...)``, ``("URI", ...)``,
    ``("DirName", <RFC 2253 name>)``, ``("RID", <dotted OID>)``, and for other forms the hex of their
    DER. Empty without the extension."""
    fields = _tbs_fields(cert_der)
    extensions = [f for f in fields[6:] if f[0] == _EXTENSIONS]
    if not extensions:
        return set()
    _, ext_start, ext_end, _ = extensions[0]
    (seq_start, seq_end) = _only_item(cert_der[ext_start:ext_end], _SEQUENCE, "Extensions")
    base = ext_start
    for tag, start, end, _ in _der_items(cert_der, base + seq_start, base + seq_end):
        if tag != _SEQUENCE:
            raise ValueError("extension is not a SEQUENCE")
        parts = list(_der_items(cert_der, start, end))
        if not parts or parts[0][0] != _OID or parts[-1][0] != _OCTET_STRING:
            raise ValueError("extension is not an OID and a value")
        if _oid_text(cert_der[parts[0][1]:parts[0][2]]) != _SUBJECT_ALT_NAME:
            continue
        value = cert_der[parts[-1][1]:parts[-1][2]]
        names_start, names_end = _only_item(value, _SEQUENCE, "GeneralNames")
        return {_general_name(value, *item) for item in _der_items(value, names_start, names_end)}
    return set()


def pem_certificates(pem: bytes) -> list[bytes]:
    """The DER bytes of each ``-----BEGIN CERTIFICATE-----`` block of PEM text, in order; other blocks
    (private keys) and text between blocks are skipped. Raises ValueError naming the block that is not
    a certificate."""
    out = []
    for number, match in enumerate(_PEM_CERTIFICATE_RE.finditer(pem), 1):
        try:
            der = base64.b64decode(b"".join(match.group(1).split()), validate=True)
            _tbs_fields(der)
        except (binascii.Error, ValueError) as e:
            raise ValueError(f"certificate {number} cannot be read: {e}") from None
        out.append(der)
    return out

