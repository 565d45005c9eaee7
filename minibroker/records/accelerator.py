"""Which record layer runs: the optional C accelerator, or the pure-Python code it mirrors.

The accelerator (``_accelerator.c``, compiled at ``pip install`` where a C compiler and Python's
headers are present; setup.py marks it optional) takes over the per-record loops of an append: the
structure walk of v2 records (``v2.walk_records``) and the record-boundary scan of compressed
sections (``v2._whole_records``). The Python code stays the reference: the C functions decide only
what they decide exactly as it does and hand everything else back (a record that does not parse is
reported by the Python code, in Kafka's words), so both give the same results and the same errors
on any input (tests/records/test_accelerator.py checks it, docs/records.md says how).

``MINIBROKER_PURE_PYTHON=1`` (or ``true``/``yes``) in the environment when the record layer is
first imported keeps the accelerator unloaded. Tests switch at run time with ``use_accelerator``.
Importing this module loads nothing else of the record layer (the package's ``__init__`` is lazy):
``minibroker serve`` logs ``describe()`` at start without loading the validator.
"""

from __future__ import annotations

import importlib
import os

ENV_VAR = "MINIBROKER_PURE_PYTHON"
# A walk of a section this large releases the GIL (a worker thread's walk lets the event loop run)
RELEASE_GIL_BYTES = 64 * 1024


def _pure_python_asked() -> bool:
    return os.environ.get(ENV_VAR, "").strip().lower() in ("1", "true", "yes")


def _load():
    """(module or None, why not)"""
    if _pure_python_asked():
        return None, f"{ENV_VAR} is set"
    try:  # by its full name: an import of the compiled module, not of the package's __init__
        _accelerator = importlib.import_module("minibroker.records._accelerator")
    except ImportError as exc:
        return None, f"the C accelerator is not built ({exc})"
    _accelerator.set_release_gil_bytes(RELEASE_GIL_BYTES)
    return _accelerator, ""


extension, _why_not = _load()
# The functions the record layer calls, None when the pure-Python code runs (read at each call, so
# that use_accelerator switches every caller at once)
walk_records = extension.walk_records if extension is not None else None
whole_records = extension.whole_records if extension is not None else None


def active() -> bool:
    """Whether the C accelerator runs."""
    return walk_records is not None


def describe() -> str:
    """One line for the start-up log: which path, and why."""
    if active():
        return f"C accelerator ({os.path.basename(extension.__file__)})"
    if extension is not None:
        return "pure Python (the C accelerator is loaded but switched off)"
    return f"pure Python ({_why_not})"


def use_accelerator(on: bool) -> bool:
    """Switch the record layer to the C accelerator (``on``, if it is built) or to pure Python, for
    tests that run both paths; returns whether it was on. Not thread-safe: switch between appends."""
    global walk_records, whole_records
    was = active()
    if on and extension is None:
        raise RuntimeError(f"the C accelerator is not available: {_why_not}")
    walk_records = extension.walk_records if on else None
    whole_records = extension.whole_records if on else None
    return was
