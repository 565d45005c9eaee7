"""A fuzzer for the broker's wire protocol (issue 14, item 7): mutated real-client requests over a
real socket, judged by an oracle. Used by tests/test_fuzz.py and scripts/fuzz.py (which puts tests/ on
sys.path), and by the decompression-bomb tests and scripts/bench_bombs.py (``bombs``). Test tooling: it
is not part of the installed package, and nothing of the broker imports it.

- ``walk``: where each field of an encoded request lies (spans for structure-aware mutators);
- ``corpus``: seed frames, captured from real clients (``capture``) or encoded by our codec;
- ``mutate``: mutators and exchanges, driven by a seeded RNG or by Hypothesis;
- ``harness``: what the broker must do with an exchange, the client that checks it, the oracle.
"""

from minibroker.handlers import load_handlers

load_handlers()  # the fuzzer reads HANDLERS (what is served) even when the broker runs elsewhere
