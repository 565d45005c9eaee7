"""The client side of fault injection (minibroker/server/faults.py): ``FaultsHttp`` talks to a broker's
``/faults`` API on its metrics port; ``FaultHandle`` is what ``BrokerRunner.inject`` (the pytest fixture)
hands out, over that API or straight to an in-process broker (any object with the same five methods).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request


class FaultApiError(RuntimeError):
    """The broker refused a call (``status`` and the broker's reason), or could not be reached."""

    def __init__(self, status: int, message: str):
        super().__init__(f"{status}: {message}" if status else message)
        self.status = status


class FaultsHttp:
    """``/faults`` of one broker: ``FaultsHttp("http://127.0.0.1:9404")``."""

    def __init__(self, url: str, timeout: float = 10.0):
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _call(self, method: str, path: str, body=None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                return json.loads(answer.read() or b"null")
        except urllib.error.HTTPError as e:
            try:
                message = json.loads(e.read()).get("error", e.reason)
            except (ValueError, AttributeError):
                message = str(e.reason)
            if e.code == 404 and path.startswith("/faults/rules/"):
                return None
            if e.code in (404, 405):  # the metrics server alone: no /faults routes
                message = "no /faults here: is fault.injection.enable=true set on the broker?"
            raise FaultApiError(e.code, message) from None
        except (urllib.error.URLError, OSError) as e:
            raise FaultApiError(0, f"{self.url}: {getattr(e, 'reason', e)}") from None

    def add(self, spec: dict) -> dict:
        return self._call("POST", "/faults/rules", spec)

    def get(self, rule_id: int) -> dict | None:
        return self._call("GET", f"/faults/rules/{rule_id}")

    def rules(self) -> list[dict]:
        return self._call("GET", "/faults/rules")

    def remove(self, rule_id: int) -> dict | None:
        """The rule as it was removed (its final count), or None when there was none."""
        return self._call("DELETE", f"/faults/rules/{rule_id}")

    def clear(self) -> int:
        return self._call("DELETE", "/faults/rules")["removed"]

    def release(self, rule_id: int | None = None) -> int:
        path = "/faults/release" if rule_id is None else f"/faults/rules/{rule_id}/release"
        answer = self._call("POST", path, {})
        return 0 if answer is None else answer["released"]


class FaultHandle:
    """One rule: ``.matched`` (read fresh), ``.remove()``, ``.release()``, ``wait_until_matched(n)``; as a
    context manager, removed on exit."""

    def __init__(self, api, rule: dict):
        self._api = api
        self.id: int = rule["id"]
        self.rule = rule

    @property
    def matched(self) -> int:
        rule = self._api.get(self.id)
        if rule is not None:
            self.rule = rule
        return self.rule["matched"]

    def remove(self) -> None:
        rule = self._api.remove(self.id)
        if rule is not None:
            self.rule = rule

    def release(self) -> int:
        """Let the requests this rule holds go on."""
        return self._api.release(self.id)

    def wait_until_matched(self, n: int = 1, timeout: float = 10.0) -> int:
        """Wait until the rule has acted on ``n`` requests; its count then, or TimeoutError."""
        deadline = time.monotonic() + timeout
        while True:
            matched = self.matched
            if matched >= n:
                return matched
            if time.monotonic() >= deadline:
                raise TimeoutError(f"fault rule {self.id} matched {matched} of {n} requests in {timeout} s")
            time.sleep(0.02)

    def __enter__(self) -> FaultHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"FaultHandle({self.rule})"
