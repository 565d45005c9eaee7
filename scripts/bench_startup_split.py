"""What a broker's start adds to the event-loop floor, timed inside the process.

    python scripts/bench_startup_split.py [--reps 30] [--tree PATH ...]

scripts/bench.py times start-up from outside: process start to a port that accepts, against the
event-loop floor started the same way. Both include the interpreter's own start (`site`, 50-60 ms on
the test machines, with a sandbox `.pth` that imports certifi), which swings by tens of milliseconds
between runs and hides a few milliseconds of change. Here each process takes its time from its own
first line to the moment its listening socket is made (`listen()` returns; the kernel completes
connections from then on): the floor imports asyncio and uvloop and serves one socket, the broker
runs `minibroker serve` (plaintext, default config, a new log dir) as `python -m minibroker` would.
The interpreter's start, common to both, is left out; the difference of the medians is what the
broker's own modules and work cost. Runs alternate floor and each tree, so a drift of the machine
moves every side alike. ``--tree`` (repeatable) compares checkouts: each runs its own code.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Both: the clock starts at the script's first line; listen() prints the elapsed ms and exits.
_TIMED_LISTEN = """
import time
t0 = time.perf_counter()
import os, socket, sys
_listen = socket.socket.listen
def listen(self, *args):
    _listen(self, *args)
    os.write(1, b"%.3f\\n" % ((time.perf_counter() - t0) * 1000))
    os._exit(0)
socket.socket.listen = listen
"""

FLOOR = _TIMED_LISTEN + """
import asyncio
try:
    import uvloop
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
except ImportError:
    pass
async def main():
    sock = socket.create_server(("127.0.0.1", 0), backlog=1024)
    sock.setblocking(False)
    await asyncio.get_running_loop().create_server(asyncio.Protocol, sock=sock)
    await asyncio.sleep(60)
asyncio.run(main())
"""

BROKER = _TIMED_LISTEN + """
import runpy
sys.argv = ["minibroker", "serve", "--log-level", "WARNING", "--override", "listeners=PLAINTEXT://127.0.0.1:0",
            "--override", "log.dirs=" + sys.argv[1]]
runpy.run_module("minibroker", run_name="__main__", alter_sys=True)
"""


def _env(tree: str | None) -> dict:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # bytecode caches on, as an installed package has them
    if tree is not None:
        env["PYTHONPATH"] = tree
    return env


def timed(code: str, tree: str | None) -> float:
    data_dir = tempfile.mkdtemp(prefix="mb-split-")
    try:
        out = subprocess.run([sys.executable, "-c", code, os.path.join(data_dir, "data")], env=_env(tree),
                             cwd=tree or data_dir, capture_output=True, text=True, timeout=60)
        if out.returncode != 0 or not out.stdout.strip():
            raise RuntimeError(f"no listen() timing (exit {out.returncode}): {out.stderr[-2000:]}")
        return float(out.stdout.split()[-1])
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--tree", action="append", help="a checkout to run (default: this one); repeatable")
    args = ap.parse_args(argv)
    trees = [os.path.abspath(t) for t in (args.tree or [ROOT])]
    for tree in trees:  # bytecode caches written before anything is timed
        timed(BROKER, tree)
    times: dict[str, list[float]] = {"floor": [], **{t: [] for t in trees}}
    for _ in range(args.reps):
        times["floor"].append(timed(FLOOR, None))
        for tree in trees:
            times[tree].append(timed(BROKER, tree))
    floor = statistics.median(times["floor"])
    print(f"first line to listen(), {args.reps} starts each, alternating (load average "
          f"{os.getloadavg()[0]:.2f} at the end):")
    for name, values in times.items():
        median = statistics.median(values)
        extra = "" if name == "floor" else f"; over the floor {median - floor:+.1f} ms"
        print(f"  {name}: median {median:.1f} ms (min {min(values):.1f}, max {max(values):.1f}){extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
