"""ScramCredentialStore: the SCRAM credentials of every user, as Kafka's controller keeps them
(ScramControlManager) and its brokers cache them (CredentialCache).

Owner of: ``minibroker-scram-credentials.json`` at the log dir root (minibroker/storage/metadata_file.py),
read once at start-up and rewritten whole on every change; used from the event loop only (the SCRAM
exchange reads it, AlterUserScramCredentials changes it). A credential is salt, StoredKey, ServerKey and
iterations per user and mechanism; passwords and salted passwords are never kept. A change is applied in
memory only once the file is saved, so a failed save (ENOSPC, EIO) leaves both as they were.

File layout (bytes in base64)::

    {"version": 1, "users": {"alice": {"SCRAM-SHA-256": {"salt": "...", "stored_key": "...",
                                                         "server_key": "...", "iterations": 8192}}}}

``write_offline`` adds credentials to a directory no broker runs on (``minibroker scram --data-dir``,
like ``kafka-storage.sh format --add-scram``).
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
from typing import NamedTuple

from minibroker.errors import ErrorCode
from minibroker.security.sasl.scram import (
    MAX_ITERATIONS,
    MECHANISMS,
    MECHANISMS_BY_TYPE,
    ScramCredential,
    ScramMechanism,
    credential_from_salted_password,
)
from minibroker.storage.metadata_file import load_metadata, save_metadata

log = logging.getLogger("minibroker.security")

CREDENTIALS_FILE = "minibroker-scram-credentials.json"
FORMAT_VERSION = 1


class Deletion(NamedTuple):
    user: str
    mechanism: int  # the wire's type: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512


class Upsertion(NamedTuple):
    user: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes


class UserResult(NamedTuple):
    user: str
    error_code: int
    error_message: str | None


class UserDescription(NamedTuple):
    user: str
    error_code: int
    error_message: str | None
    credentials: list[tuple[int, int]]  # (mechanism type, iterations)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _to_json(users: dict[str, dict[str, ScramCredential]]) -> dict:
    return {"version": FORMAT_VERSION, "users": {
        user: {mech: {"salt": _b64(c.salt), "stored_key": _b64(c.stored_key),
                      "server_key": _b64(c.server_key), "iterations": c.iterations}
               for mech, c in creds.items()}
        for user, creds in users.items() if creds}}


def _from_json(saved, path: str) -> dict[str, dict[str, ScramCredential]]:
    users: dict[str, dict[str, ScramCredential]] = {}
    if not isinstance(saved, dict) or not isinstance(saved.get("users", {}), dict):
        log.warning("ignoring %s: not a SCRAM credentials file", path)
        return users
    for user, creds in saved.get("users", {}).items():
        if not isinstance(creds, dict):
            log.warning("ignoring the SCRAM credentials of %r in %s: malformed", user, path)
            continue
        for mech, c in creds.items():
            try:
                if mech not in MECHANISMS:
                    raise ValueError(f"unknown mechanism {mech}")
                salt, stored_key, server_key = (base64.b64decode(c[field], validate=True)
                                                for field in ("salt", "stored_key", "server_key"))
                credential = ScramCredential(salt, stored_key, server_key, int(c["iterations"]))
            except (KeyError, TypeError, ValueError, binascii.Error) as e:
                log.warning("ignoring the %s credential of %r in %s: %s", mech, user, path, e)
                continue
            users.setdefault(user, {})[mech] = credential
    return users


class ScramCredentialStore:
    def __init__(self, data_dir: str):
        self.data_dir = data_dir
        self._users = _from_json(load_metadata(data_dir, CREDENTIALS_FILE, {}),
                                 os.path.join(data_dir, CREDENTIALS_FILE))
        if self._users:
            log.info("loaded SCRAM credentials of %d user(s)", len(self._users))

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    def users(self) -> list[str]:
        return sorted(self._users)

    def describe(self, users: list[str] | None) -> list[UserDescription]:
        """DescribeUserScramCredentials as Kafka's ScramImage answers it: None or empty = every user;
        a user asked twice is DUPLICATE_RESOURCE, one without credentials RESOURCE_NOT_FOUND."""
        if not users:
            names = {user: 1 for user in sorted(self._users)}
        else:
            names = {}
            for user in users:
                names[user] = names.get(user, 0) + 1
        out = []
        for user, count in names.items():
            if count > 1:
                message = ("Cannot describe SCRAM credentials for the same user twice in a single request: "
                           f"{user}")
                out.append(UserDescription(user, ErrorCode.DUPLICATE_RESOURCE, message, []))
            elif not self._users.get(user):
                out.append(UserDescription(user, ErrorCode.RESOURCE_NOT_FOUND, "Attempt to describe a user "
                                           f"credential that does not exist: {user}", []))
            else:
                out.append(UserDescription(user, 0, None, [
                    (MECHANISMS[mech].type, c.iterations) for mech, c in sorted(self._users[user].items())]))
        return out

    def alter(self, deletions: list[Deletion], upsertions: list[Upsertion]) -> list[UserResult]:
        """AlterUserScramCredentials as Kafka's ScramControlManager checks it: one alteration per user
        per request (DUPLICATE_RESOURCE), an empty name or unknown mechanism refused, iterations within
        [the mechanism's minimum, 16384] (UNACCEPTABLE_CREDENTIAL), deleting a missing credential
        RESOURCE_NOT_FOUND. The accepted ones are applied together and saved; a failed save answers
        them all UNKNOWN_SERVER_ERROR and changes nothing."""
        errors: dict[str, tuple[int, str]] = {}
        to_delete: dict[str, Deletion] = {}
        to_upsert: dict[str, tuple[Upsertion, ScramMechanism]] = {}
        duplicate = (ErrorCode.DUPLICATE_RESOURCE,
                     "A user credential cannot be altered twice in the same request")
        for d in deletions:
            if d.user in errors:
                continue
            if to_delete.pop(d.user, None) is not None:
                errors[d.user] = duplicate
                continue
            mechanism, error = self._check_name_and_mechanism(d.user, d.mechanism)
            if error is None and self.get(d.user, mechanism.name) is None:
                error = (ErrorCode.RESOURCE_NOT_FOUND,
                         "Attempt to delete a user credential that does not exist")
            if error is not None:
                errors[d.user] = error
            else:
                to_delete[d.user] = d
        for u in upsertions:
            if u.user in errors:
                continue
            if to_delete.pop(u.user, None) is not None or to_upsert.pop(u.user, None) is not None:
                errors[u.user] = duplicate
                continue
            mechanism, error = self._check_name_and_mechanism(u.user, u.mechanism)
            if error is None:
                if u.iterations < mechanism.min_iterations:
                    error = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
                elif u.iterations > MAX_ITERATIONS:
                    error = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
            if error is not None:
                errors[u.user] = error
            else:
                to_upsert[u.user] = (u, mechanism)
        new = {user: dict(creds) for user, creds in self._users.items()}
        for d in to_delete.values():
            new[d.user].pop(MECHANISMS_BY_TYPE[d.mechanism].name, None)
        for u, mechanism in to_upsert.values():
            new.setdefault(u.user, {})[mechanism.name] = credential_from_salted_password(
                mechanism, bytes(u.salt), bytes(u.salted_password), u.iterations)
        accepted = [*to_delete, *to_upsert]
        if accepted:
            try:
                save_metadata(self.data_dir, CREDENTIALS_FILE, _to_json(new))
            except OSError as e:
                log.error("could not save SCRAM credentials: %s", e)
                for user in accepted:
                    errors[user] = (ErrorCode.UNKNOWN_SERVER_ERROR, f"Could not save the credentials: {e}")
                accepted = []
            else:
                self._users = {user: creds for user, creds in new.items() if creds}
                for d in to_delete.values():
                    log.info("deleted the %s credential of user %s", MECHANISMS_BY_TYPE[d.mechanism].name,
                             d.user)
                for u, mechanism in to_upsert.values():
                    log.info("set the %s credential of user %s (%d iterations)", mechanism.name, u.user,
                             u.iterations)
        return ([UserResult(user, 0, None) for user in accepted]
                + [UserResult(user, code, message) for user, (code, message) in errors.items()])

    @staticmethod
    def _check_name_and_mechanism(user: str, mechanism_type: int) -> tuple[ScramMechanism | None,
                                                                          tuple[int, str] | None]:
        if not user:
            return None, (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        mechanism = MECHANISMS_BY_TYPE.get(mechanism_type)
        if mechanism is None:
            return None, (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        return mechanism, None


def write_offline(data_dir: str, upserts: list[tuple[str, ScramMechanism, ScramCredential]],
                  deletes: list[tuple[str, ScramMechanism]]) -> None:
    """Change the credentials file of a directory no broker is using (the log dir lock is held meanwhile:
    a running broker makes this raise LogDirLockedError)."""
    from minibroker.storage.dir_lock import LogDirLock

    os.makedirs(data_dir, exist_ok=True)
    lock = LogDirLock(data_dir).acquire()
    try:
        path = os.path.join(data_dir, CREDENTIALS_FILE)
        users = _from_json(load_metadata(data_dir, CREDENTIALS_FILE, {}), path)
        for user, mechanism in deletes:
            users.get(user, {}).pop(mechanism.name, None)
        for user, mechanism, credential in upserts:
            users.setdefault(user, {})[mechanism.name] = credential
        save_metadata(data_dir, CREDENTIALS_FILE, _to_json(users))
    finally:
        lock.release()


def read_offline(data_dir: str) -> dict[str, dict[str, ScramCredential]]:
    """The credentials saved in ``data_dir`` (for ``minibroker scram --describe --data-dir``)."""
    return _from_json(load_metadata(data_dir, CREDENTIALS_FILE, {}), os.path.join(data_dir, CREDENTIALS_FILE))
