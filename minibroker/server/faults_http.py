"""``/faults``: the fault injection rules over HTTP, on the metrics port (``fault.injection.enable=true``).

JSON in and out, one request per connection like the rest of the metrics server:

- ``GET /faults/rules``: every rule, with its ``id``, ``matched`` and ``held`` counts;
- ``POST /faults/rules`` with a rule (docs/testing.md, "Faults on demand"): 201 and the rule; 400 and
  ``{"error": ...}`` when it cannot be applied;
- ``GET /faults/rules/<id>``, ``DELETE /faults/rules/<id>``: one rule (404 when there is none);
- ``DELETE /faults/rules``: every rule;
- ``POST /faults/rules/<id>/release``, ``POST /faults/release``: let held requests go on.

A POST or PUT must say ``Content-Type: application/json`` (415 otherwise): a web page cannot send that
type across origins without a CORS preflight, which this server never answers, so a page open in the
developer's browser cannot add rules. The body is read under the same deadline as the head.

Mounted by ``Broker.start`` in ``broker.metrics_mounts``; nothing of it exists otherwise.
"""

from __future__ import annotations

import asyncio
import json

from minibroker.server.faults import RuleError

BODY_LIMIT = 64 * 1024
JSON = "application/json"


def serve_faults(broker, faults) -> None:
    from minibroker.server.metrics_http import HEAD_TIMEOUT, answering_with

    async def route(method: str, target: str, head: bytes, reader: asyncio.StreamReader):
        media_type = _header(head, b"content-type").split(";", 1)[0].strip().lower()
        if method in ("POST", "PUT") and media_type != JSON:
            return _json("415 Unsupported Media Type", {"error": f"a {method} needs Content-Type: {JSON}"})
        try:
            async with asyncio.timeout(HEAD_TIMEOUT):  # a body declared and never sent pins no task
                body = await _body(head, reader)
            return _answer(faults, method, target.split("?", 1)[0], body)
        except RuleError as e:
            return _json("400 Bad Request", {"error": str(e)})

    broker.metrics_mounts["/faults"] = answering_with(route)


def _header(head: bytes, wanted: bytes) -> str:
    """The value of the header named ``wanted`` (lower case) in a request's head, "" when absent."""
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == wanted:
            return value.strip().decode("latin-1")
    return ""


async def _body(head: bytes, reader: asyncio.StreamReader) -> bytes:
    try:
        length = int(_header(head, b"content-length") or 0)
    except ValueError:
        raise RuleError("bad Content-Length") from None
    if not 0 <= length <= BODY_LIMIT:
        raise RuleError(f"a body of at most {BODY_LIMIT} bytes")
    return await reader.readexactly(length) if length else b""


def _json(status: str, value) -> tuple[str, bytes, str]:
    return status, json.dumps(value).encode() + b"\n", JSON


def _answer(faults, method: str, target: str, body: bytes) -> tuple[str, bytes, str]:
    parts = [p for p in target.split("/") if p][1:]  # after "faults"
    if parts == ["release"] and method == "POST":
        return _json("200 OK", {"released": faults.release()})
    if not parts or parts[0] != "rules" or len(parts) > 3:
        return _json("404 Not Found", {"error": "not found: see GET /faults/rules"})
    if len(parts) == 1:
        if method == "GET":
            return _json("200 OK", [r.to_json() for r in faults.rules])
        if method == "POST":
            try:
                spec = json.loads(body or b"null")
            except ValueError as e:
                raise RuleError(f"not JSON: {e}") from None
            return _json("201 Created", faults.add(spec).to_json())
        if method == "DELETE":
            return _json("200 OK", {"removed": faults.clear()})
        return _json("405 Method Not Allowed", {"error": "GET, POST or DELETE"})
    try:
        rule_id = int(parts[1])
    except ValueError:
        return _json("404 Not Found", {"error": f"no rule {parts[1]!r}"})
    rule = faults.get(rule_id)
    if rule is None:
        return _json("404 Not Found", {"error": f"no rule {rule_id}"})
    if len(parts) == 3:
        if parts[2] == "release" and method == "POST":
            return _json("200 OK", {"released": faults.release(rule_id)})
        return _json("404 Not Found", {"error": "POST /faults/rules/<id>/release"})
    if method == "GET":
        return _json("200 OK", rule.to_json())
    if method == "DELETE":
        faults.remove(rule_id)
        return _json("200 OK", rule.to_json())
    return _json("405 Method Not Allowed", {"error": "GET or DELETE"})
