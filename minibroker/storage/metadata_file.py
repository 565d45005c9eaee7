"""Small JSON files at the log dir root for state Kafka keeps in its cluster metadata log: dynamic
broker configs, ACLs, SCRAM credentials, client quotas. Rewritten whole and atomically on every change
(temp file, fsync, rename), read once at start-up."""

from __future__ import annotations

import json
import logging
import os

from minibroker.storage.checkpoints import write_atomically

log = logging.getLogger("minibroker.storage")


def load_metadata(data_dir: str, name: str, default):
    """The saved object, ``default`` when the file does not exist; an unreadable file is logged and read
    as ``default`` so the broker still starts (the next change rewrites it)."""
    path = os.path.join(data_dir, name)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return default
    except (OSError, ValueError) as e:
        log.warning("ignoring unreadable %s: %s", path, e)
        return default


def save_metadata(data_dir: str, name: str, obj) -> None:
    """Replace the file with ``obj`` as JSON; raises OSError (ENOSPC, EIO) for the caller to answer."""
    write_atomically(os.path.join(data_dir, name), json.dumps(obj, indent=1, sort_keys=True) + "\n")
