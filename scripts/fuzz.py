#!/usr/bin/env python3
"""Fuzz a broker with mutated real-client requests (issue 14, item 7): the long run.

The same machinery as tests/test_fuzz.py (tests/fuzzing), standalone, against a broker in its
own process (``--mode thread`` runs it in this process instead):

- seeds: our codec's frames for every served API key and version, and the frames real clients sent
  (tests/data/fuzz_client_frames.txt, recorded by ``scripts/fuzz.py capture``);
- exchange i is built from ``random.Random(f"{seed}:{i}")`` over the seed frames of the moment
  (regenerated at each check: they name the group's live member, whose id changes), so a failing
  exchange is reproduced from its saved bytes (``replay``), not from its number;
- ``--lanes`` connections send exchanges at once; each answer is judged as it comes (hangs, answers
  that do not decode); every ``--check-every`` exchanges and at the end the oracle runs (a fresh
  ApiVersions answers, no traceback or ERROR in the broker's log, the data produced before fuzzing
  reads back byte for byte);
- a failing exchange is saved to ``--out`` (its bytes, ``.bin``, and what was done to it, ``.txt``);
  when a check fails, every exchange since the previous check is saved, and ``replay`` finds which
  one it was.

    python scripts/fuzz.py [--frames 100000] [--seed 1] [--lanes 4] [--bomb-mib 16]
    python scripts/fuzz.py replay fuzz-failures/<run>/*.bin   # one by one, on a fresh broker
    python scripts/fuzz.py capture                          # re-record the client frames

Exit status 0 when nothing failed.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import re
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))  # the fuzzer: tests/fuzzing, not part of the package

from minibroker.testing import BrokerRunner  # noqa: E402

from fuzzing.harness import (  # noqa: E402
    Client,
    FileLogWatch,
    Oracle,
    ThreadLogWatch,
    seed_frames,
)
from fuzzing.mutate import Bombs, MutationConfig, RandomChooser, make_exchange  # noqa: E402

CORPUS = os.path.join(ROOT, "tests", "data", "fuzz_client_frames.txt")


class Run:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.counts: collections.Counter = collections.Counter()
        self.frames = 0
        self.exchanges = 0
        self.next_index = itertools.count()
        self.window: collections.deque = collections.deque(maxlen=4 * args.check_every)
        self.failures: list[dict] = []
        self.slowest: list[tuple[float, int, str]] = []
        self.stop = threading.Event()
        self.out = os.path.join(args.out, time.strftime("%Y%m%d-%H%M%S") + f"-seed{args.seed}")

    # -- the broker ---------------------------------------------------------------------------------

    def start_broker(self) -> BrokerRunner:
        if self.args.loop != "auto":
            os.environ["MINIBROKER_LOOP"] = self.args.loop
        runner = BrokerRunner({"group.initial.rebalance.delay.ms": "0"}, mode=self.args.mode)
        if self.args.mode == "thread":
            self.logs = ThreadLogWatch().install()
        runner.start()
        if self.args.mode == "process":
            self.logs = FileLogWatch(runner._log_path)
        return runner

    # -- saving ---------------------------------------------------------------------------------------

    def save(self, name: str, exchange, text: str) -> str:
        os.makedirs(self.out, exist_ok=True)
        path = os.path.join(self.out, name)
        with open(path + ".bin", "wb") as f:
            f.write(exchange.data)
        with open(path + ".txt", "w", encoding="utf-8") as f:
            f.write(text + "\n" + "\n".join(exchange.notes) + "\n")
            if len(exchange.chunks) > 1:
                f.write(f"chunks: {[len(c) for c in exchange.chunks]}\n")
        return path

    # -- lanes ----------------------------------------------------------------------------------------

    def lane(self, port: int, cfg, protection) -> None:
        client = Client(
            "127.0.0.1", port, hang_timeout=self.args.hang_timeout, wait_cutoff=0.5, protection=protection
        )
        try:
            while not self.stop.is_set():
                with self.lock:
                    if self.frames >= self.args.frames:
                        return
                    i = next(self.next_index)
                exchange = make_exchange(RandomChooser(f"{self.args.seed}:{i}"), self.seeds, cfg)
                started = time.monotonic()
                outcome = client.run(exchange.chunks)
                took = time.monotonic() - started
                with self.lock:
                    self.exchanges += 1
                    if outcome.kind != "skipped":
                        self.frames += exchange.frames
                    self.counts[outcome.kind] += 1
                    self.window.append((i, exchange, outcome))
                    if outcome.kind in ("answered", "closed") and took > 1.0:
                        self.slowest.append((took, i, "; ".join(exchange.notes)[:300]))
                        self.slowest = sorted(self.slowest, reverse=True)[:5]
                if outcome.failed:
                    path = self.save(f"{i:07d}-{outcome.kind}", exchange, f"{outcome.kind}: {outcome.detail}")
                    with self.lock:
                        self.failures.append(
                            {"kind": outcome.kind, "exchange": i, "detail": outcome.detail, "saved": path}
                        )
                    print(f"  exchange {i}: {outcome.kind}: {outcome.detail} -> {path}.bin", flush=True)
        finally:
            client.close()

    # -- checks ---------------------------------------------------------------------------------------

    def check(self, oracle: Oracle, number: int, final: bool = False) -> None:
        problems = oracle.check(data=True, tidy=not final)
        if not final:  # the group's member may have changed: generated group requests name the new one
            self.seeds = seed_frames(oracle, self.args.corpus, self.args.seed * 100_000 + number)
        with self.lock:
            window = list(self.window)
            self.window.clear()
        if not problems:
            return
        kinds = collections.Counter()
        for p in problems:
            kind = (
                "data_change"
                if p.startswith("data change")
                else "unresponsive"
                if p.startswith("unresponsive")
                else "traceback"
            )
            kinds[kind] += 1
        saved = os.path.join(self.out, f"check-{number:04d}")
        os.makedirs(saved, exist_ok=True)
        with open(os.path.join(saved, "problems.txt"), "w", encoding="utf-8") as f:
            f.write("\n\n".join(problems) + "\n")
        for i, exchange, outcome in window:
            path = os.path.join(saved, f"{i:07d}")
            with open(path + ".bin", "wb") as f:
                f.write(exchange.data)
            with open(path + ".txt", "w", encoding="utf-8") as f:
                f.write(f"{outcome.kind}: {outcome.detail}\n" + "\n".join(exchange.notes) + "\n")
        with self.lock:
            for kind, n in kinds.items():
                self.counts[kind] += n
            self.failures.append(
                {
                    "kind": "check",
                    "check": number,
                    "problems": [p[:2000] for p in problems],
                    "saved": saved,
                    "window": len(window),
                }
            )
        print(
            f"  check {number}: {len(problems)} problem(s), {len(window)} exchanges saved in {saved}",
            flush=True,
        )
        for p in problems[:5]:
            print("    " + p[:1500].replace("\n", "\n    "), flush=True)

    # -- the run --------------------------------------------------------------------------------------

    def main(self) -> int:
        args = self.args
        runner = self.start_broker()
        started = time.monotonic()
        try:
            oracle = Oracle(
                "127.0.0.1",
                runner.port,
                self.logs,
                deadline=args.hang_timeout,
                expected_errors=[re.compile(e) for e in args.expect],
            )
            oracle.setup()
            self.seeds = seeds = seed_frames(oracle, args.corpus, args.seed)
            cfg = MutationConfig(bombs=Bombs(args.bomb_mib << 20) if args.bomb_mib else None)
            protection = oracle.protection()
            print(
                f"fuzzing {runner.bootstrap_servers} ({args.mode} mode): {len(seeds)} seed frames, "
                f"seed {args.seed}, {args.frames} frames, {args.lanes} lanes",
                flush=True,
            )
            lanes = [
                threading.Thread(target=self.lane, args=(runner.port, cfg, protection), daemon=True)
                for _ in range(args.lanes)
            ]
            for t in lanes:
                t.start()
            number = 0
            last_report = time.monotonic()
            next_check = args.check_every
            while any(t.is_alive() for t in lanes):
                time.sleep(0.2)
                if runner.process is not None and runner.process.poll() is not None:
                    self.counts["broker_died"] += 1
                    self.stop.set()
                    print(f"  the broker exited with {runner.process.returncode}", flush=True)
                    break
                if self.exchanges >= next_check:
                    number += 1
                    next_check += args.check_every
                    self.check(oracle, number)
                if time.monotonic() - last_report > 30:
                    last_report = time.monotonic()
                    rate = self.frames / (time.monotonic() - started)
                    print(
                        f"  {self.frames} frames, {self.exchanges} exchanges, {rate:.0f} frames/s, "
                        f"{dict(self.counts)}",
                        flush=True,
                    )
            for t in lanes:
                t.join(args.hang_timeout + 5)
            if not self.counts["broker_died"]:
                number += 1
                self.check(oracle, number, final=True)
        finally:
            duration = time.monotonic() - started
            runner.cleanup()
        return self.summary(duration)

    def summary(self, duration: float) -> int:
        c = self.counts
        failed = sum(
            c[k] for k in ("hang", "bad_response", "traceback", "data_change", "unresponsive", "broker_died")
        )
        result = {
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "seed": self.args.seed,
            "mode": self.args.mode,
            "loop": self.args.loop,
            "lanes": self.args.lanes,
            "bomb_mib": self.args.bomb_mib,
            "frames": self.frames,
            "exchanges": self.exchanges,
            "answered": c["answered"],
            "closed_by_broker": c["closed"],
            "incomplete": c["incomplete"],
            "waited": c["waited"],
            "skipped_protected": c["skipped"],
            "tracebacks": c["traceback"],
            "hangs": c["hang"] + c["unresponsive"],
            "bad_responses": c["bad_response"],
            "data_changes": c["data_change"],
            "broker_died": c["broker_died"],
            "duration_s": round(duration, 1),
            "frames_per_s": round(self.frames / duration, 1) if duration else 0,
            "slowest_answers": [
                {"seconds": round(t, 2), "exchange": i, "what": w} for t, i, w in self.slowest
            ],
            "failures_saved_in": self.out if self.failures else None,
        }
        print(json.dumps(result, indent=2))
        return 1 if failed else 0


def replay(args) -> int:
    """Each file's bytes as one exchange, on a fresh broker set up as for a run; a check after each."""
    run = Run(args)
    runner = run.start_broker()
    bad = 0
    try:
        oracle = Oracle(
            "127.0.0.1",
            runner.port,
            run.logs,
            deadline=args.hang_timeout,
            expected_errors=[re.compile(e) for e in args.expect],
        )
        oracle.setup()
        client = Client(
            "127.0.0.1", runner.port, hang_timeout=args.hang_timeout, protection=oracle.protection()
        )
        for path in args.files:
            with open(path, "rb") as f:
                data = f.read()
            outcome = client.run(data)
            problems = oracle.check(data=True)
            if outcome.failed or problems:
                bad += 1
                print(f"{path}: {outcome.kind} {outcome.detail}")
                for p in problems:
                    print("    " + p[:3000].replace("\n", "\n    "))
            elif args.verbose:
                print(f"{path}: {outcome.kind} {outcome.detail}")
        client.close()
    finally:
        runner.cleanup()
    print(f"{len(args.files)} exchanges replayed, {bad} failing")
    return 1 if bad else 0


def capture(args) -> int:
    from fuzzing.capture import capture_clients
    from fuzzing.corpus import save_client_frames

    frames, ids = capture_clients()
    n = save_client_frames(args.corpus, frames, ids)
    print(f"{len(frames)} frames captured, {n} kept in {args.corpus} ({os.path.getsize(args.corpus)} bytes)")
    return 0


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("command", nargs="?", default="run", choices=("run", "replay", "capture"))
    p.add_argument("files", nargs="*", help="replay: saved exchanges (.bin)")
    p.add_argument("--frames", type=int, default=100_000, help="request frames to send (default 100000)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--lanes", type=int, default=4, help="connections sending at once")
    p.add_argument("--mode", choices=("process", "thread"), default="process")
    p.add_argument(
        "--loop",
        choices=("auto", "asyncio", "uvloop"),
        default="auto",
        help="the broker's event loop (process mode; auto = uvloop when installed)",
    )
    p.add_argument("--check-every", type=int, default=500, help="exchanges between oracle checks")
    p.add_argument(
        "--hang-timeout",
        type=float,
        default=60.0,
        help="seconds an answer may take before it counts as a hang",
    )
    p.add_argument(
        "--bomb-mib", type=int, default=16, help="largest decompression bomb, MiB inflated (0: none)"
    )
    p.add_argument("--out", default=os.path.join(ROOT, "fuzz-failures"))
    p.add_argument("--corpus", default=CORPUS)
    p.add_argument(
        "--expect",
        action="append",
        default=[],
        metavar="REGEX",
        help="a logged ERROR matching this is expected, not a failure (repeatable)",
    )
    p.add_argument("-v", "--verbose", action="store_true")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.command == "capture":
        return capture(args)
    if args.command == "replay":
        return replay(args)
    return Run(args).main()


if __name__ == "__main__":
    sys.exit(main())
