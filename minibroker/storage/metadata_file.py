"""Small JSON files at the log dir root for state Kafka keeps in its cluster metadata log: dynamic
broker configs, ACLs, SCRAM credentials, client quotas. Rewritten whole and atomically on every change
(temp file, fsync, rename), read once at start-up; a damaged one stops start-up (MetadataFileError)."""

from __future__ import annotations

import json
import os

from minibroker.storage.checkpoints import write_atomically


class MetadataFileError(OSError):
    """A metadata file exists but cannot be read or parsed: the broker does not start on it."""


def load_metadata(data_dir: str, name: str, default):
    """The saved object, ``default`` when the file does not exist.

    A file that exists and cannot be read or parsed raises MetadataFileError, so start-up stops with a
    message naming it: starting without the ACLs, SCRAM credentials or quotas it holds would silently
    open (or lock) the broker, and the next change would overwrite what may still be recovered. Writes
    are atomic (save_metadata), so only a damaged disk or a hand edit gets here."""
    path = os.path.join(data_dir, name)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return default
    except (OSError, ValueError) as e:
        raise MetadataFileError(f"cannot read {path}: {e}; repair it, restore it from a backup, or move it "
                                "away to start without what it holds") from None


def save_metadata(data_dir: str, name: str, obj) -> None:
    """Replace the file with ``obj`` as JSON; raises OSError (ENOSPC, EIO) for the caller to answer."""
    # owner-only: SCRAM keys and dynamic passwords are secrets (Kafka keeps them in its metadata log)
    write_atomically(os.path.join(data_dir, name), json.dumps(obj, indent=1, sort_keys=True) + "\n",
                     mode=0o600)
