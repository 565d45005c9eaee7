"""Issue 29: how far below the receive+append reference can a produce server's CPU per GB go? (a script,
not a test)

Usage: ``python scripts/bench_append_floor.py [--rounds 5] [--frames 600] [--kcat-records 300000]
[--only reference,recv-pwrite,...] [--out FILE.json]``

One load, every server in turn, round after round (the order rotates each round), on this machine:

- ``reference``: scripts/bench.py's Kafka-shaped append reference (``_KafkaAppendCeiling``: an
  asyncio.Protocol whose data_received appends to a bytearray, os.write of each partition's bytes, a
  packed reply), the baseline of ``bench.py --only record_layer``;
- ``recv-pwrite``: the floor of any server that writes what it receives: a blocking thread per
  connection that ``recv_into``s each whole frame (MSG_WAITALL: one call a frame) into a preallocated
  buffer and pwrites the partition's record bytes to a file;
- ``recv-crc-pwrite``: the same plus CRC32C (the ``crc32c`` package, as the broker) of each batch,
  compared with the stored one;
- ``recv-mmap``: receives the request's header into a small buffer and the record bytes straight into
  a shared mapping of the file (64 MiB windows, pre-sized with ftruncate, populated with
  MADV_POPULATE_WRITE when the window is mapped, the file truncated to its data at the end): no
  pwrite copy; ``recv-mmap-crc``: plus the CRC32C; ``recv-mmap-fault``: no populate, the pages fault
  in as the receive writes them; ``recv-mmap-near``: each request's pages populated just before its
  receive (the zeroing still warm in the cache when the receive overwrites it);
- ``splice``: the header received as for recv-mmap, the record bytes spliced socket -> pipe (1 MiB)
  -> file: no copy to user space at all (and so nothing a broker could validate without reading the
  bytes back); ``splice-crc``: then the spliced bytes read back through a read-only mapping of the
  file (MAP_POPULATE: the pages are in the page cache) for the CRC32C;
- ``broker``: ``minibroker serve`` (C accelerator as built; ``--pure-python`` for MINIBROKER_PURE_PYTHON=1).

Loads: the raw Produce generator of scripts/bench.py (its own process, pre-built Produce v7 frames of
960 1 KiB records, ~1 MiB, 5 in flight, one connection) and, with ``--kcat-records N``, kcat producing N
1 KiB text records with librdkafka's 1 MB batches (bench.py's ``kcat_produce``). The figure: the server
process's CPU (utime and stime from /proc/PID/stat, all its threads) per GB of record bytes sent, from
the first timed byte to the last answer; medians over the rounds, each as a ratio to the reference's
median in the same run. Dirty pages are written back by the kernel's flusher threads, outside every
server's figure; each file is deleted after its round.
"""

from __future__ import annotations

import argparse
import mmap
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench  # noqa: E402 - scripts/bench.py: the generator, frames, reference and process helpers

from minibroker.records import Compression  # noqa: E402

KINDS = (
    "reference", "recv-pwrite", "recv-crc-pwrite", "recv-falloc-pwrite", "recv-mmap", "recv-mmap-crc",
    "recv-mmap-fault", "recv-mmap-near", "splice", "splice-crc", "broker",
)
FLOORS = {  # kind: (sink, check CRCs)
    "recv-pwrite": ("pwrite", False),
    "recv-crc-pwrite": ("pwrite", True),
    "recv-falloc-pwrite": ("falloc-pwrite", False),
    "recv-mmap": ("mmap", False),
    "recv-mmap-crc": ("mmap", True),
    "recv-mmap-fault": ("mmap-fault", False),
    "recv-mmap-near": ("mmap-near", False),
    "splice": ("splice", False),
    "splice-crc": ("splice", True),
}
MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)  # Linux 5.14+; Python 3.11 lacks the name
WINDOW = 64 << 20  # bytes of file mapped at a time
MAX_FRAME = 8 << 20


def cpu_split(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process, all its threads."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / bench.TICKS, int(fields[12]) / bench.TICKS


# ------------------------------------------------------------------------------------------------
# the floor servers: blocking, a thread per connection, Produce v3-v7 read by hand


class PwriteSink:
    """pwrite at the end; with ``preallocate``, the blocks of the next window are allocated ahead with
    fallocate(FALLOC_FL_KEEP_SIZE) (the file's size stays what was written: no trailing zeros)."""

    def __init__(self, path: str, preallocate: bool = False):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.pos = 0
        self.allocated = 0 if preallocate else None

    def write(self, data) -> None:
        if self.allocated is not None and self.pos + len(data) > self.allocated:
            _fallocate_keep_size(self.fd, self.allocated, WINDOW)
            self.allocated += WINDOW
        self.pos += os.pwrite(self.fd, data, self.pos)

    def close(self) -> None:
        os.close(self.fd)


def _fallocate_keep_size(fd: int, offset: int, length: int) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
    if libc.fallocate(fd, 1, offset, length) != 0:  # 1: FALLOC_FL_KEEP_SIZE
        raise OSError(ctypes.get_errno(), "fallocate")


class MmapSink:
    """Record bytes received straight into the file's pages: ``region(n)`` is where the next n bytes
    go, ``commit(n)`` keeps them. The file grows a window at a time (a hole until populated or
    written) and is truncated to what was committed at the end: no trailing zeros stay."""

    def __init__(self, path: str, populate: str | None):
        """``populate``: "window" (each window once mapped), "region" (each region just before it is
        received), or None (pages fault in)."""
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self.populate = populate
        self.pos = 0
        self.map: mmap.mmap | None = None
        self.view: memoryview | None = None
        self.start = self.end = 0

    def region(self, n: int) -> memoryview:
        if self.pos + n > self.end:
            self._remap(n)
        at = self.pos - self.start
        if self.populate == "region":
            first = at // mmap.PAGESIZE * mmap.PAGESIZE
            self.map.madvise(MADV_POPULATE_WRITE, first, at + n - first)
        return self.view[at : at + n]

    def _remap(self, n: int) -> None:
        if self.map is not None:
            self.view.release()
            self.map.close()
        start = self.pos - self.pos % mmap.ALLOCATIONGRANULARITY
        length = max(WINDOW, self.pos - start + n)
        os.ftruncate(self.fd, start + length)
        self.map = mmap.mmap(self.fd, length, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=start)
        if self.populate == "window":
            first = (self.pos - start) // mmap.PAGESIZE * mmap.PAGESIZE  # pages not populated yet
            self.map.madvise(MADV_POPULATE_WRITE, first, length - first)
        self.view = memoryview(self.map)
        self.start, self.end = start, start + length

    def commit(self, n: int) -> None:
        self.pos += n

    def close(self) -> None:
        if self.map is not None:
            self.view.release()
            self.map.close()
        os.ftruncate(self.fd, self.pos)
        os.close(self.fd)


class SpliceSink:
    """Record bytes moved socket -> pipe -> file by the kernel (splice), never copied to user space."""

    PIPE_BYTES = 1 << 20

    def __init__(self, path: str):
        import fcntl

        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)  # read: read_back
        self.pos = 0
        self.rpipe, self.wpipe = os.pipe()
        fcntl.fcntl(self.wpipe, 1031, self.PIPE_BYTES)  # F_SETPIPE_SZ

    def splice_from(self, conn: socket.socket, n: int) -> int:
        """Splice ``n`` bytes; returns 1, the offsets the answer counts for them (their batch's record
        count is in bytes never looked at; kcat does not check)."""
        left = n
        while left:
            got = os.splice(conn.fileno(), self.wpipe, min(left, self.PIPE_BYTES))
            if not got:
                raise ConnectionError("closed mid-request")
            while got:
                moved = os.splice(self.rpipe, self.fd, got, offset_dst=self.pos)
                self.pos += moved
                got -= moved
                left -= moved
        return 1

    def read_back(self, start: int, n: int, check) -> bool:
        """``check(view, at, end)`` on the ``n`` bytes spliced at ``start``, through a read-only mapping."""
        first = start - start % mmap.ALLOCATIONGRANULARITY
        with mmap.mmap(self.fd, start + n - first, mmap.MAP_SHARED | mmap.MAP_POPULATE, mmap.PROT_READ,
                       offset=first) as m:
            view = memoryview(m)
            try:
                return check(view, start - first, start - first + n)
            finally:
                view.release()

    def close(self) -> None:
        os.close(self.fd)


def recv_exact(conn: socket.socket, view: memoryview) -> bool:
    """Fill ``view`` (False: the peer closed first)."""
    got, n = 0, len(view)
    while got < n:
        k = conn.recv_into(view[got:], n - got, socket.MSG_WAITALL)
        if not k:
            return False
        got += k
    return True


def batches_valid(view, start: int, end: int) -> bool:
    """CRC32C of every v2 batch in ``view[start:end]`` equals the stored one."""
    from crc32c import crc32c

    while start < end:
        length, crc = struct.unpack_from(">i5xI", view, start + 8)  # batchLength, (epoch, magic), crc
        if crc32c(view[start + 21 : start + 12 + length]) != crc:
            return False
        start += 12 + length
    return True


def produce_reply(version: int, corr: int, topic: bytes, index: int, base: int) -> bytes:
    """A Produce v3-v7 answer for one partition of one topic."""
    body = struct.pack(">ii", corr, 1) + topic + struct.pack(">iihqq", 1, index, 0, base, -1)
    if version >= 5:
        body += struct.pack(">q", 0)
    body += b"\x00\x00\x00\x00"  # throttle time
    return struct.pack(">i", len(body)) + body


class FloorServer:
    """One sink shared by the connections (kcat's bootstrap and producer connections are two)."""

    def __init__(self, kind: str, port: int, path: str):
        self.kind = kind
        sink, self.check_crc = FLOORS[kind]
        if sink.endswith("pwrite"):
            self.sink = PwriteSink(path, preallocate=sink == "falloc-pwrite")
        elif sink == "splice":
            self.sink = SpliceSink(path)
        else:
            self.sink = MmapSink(path, populate={"mmap": "window", "mmap-near": "region"}.get(sink))
        self.head_apart = not sink.endswith("pwrite")
        self.port = port
        self.lock = threading.Lock()
        self.next_offset = 0
        self.admin = bench._KafkaAppendCeiling(-1, port, 1)  # ApiVersions, Metadata, InitProducerId

    def serve(self, conn: socket.socket) -> None:
        with conn:
            buf = bytearray(MAX_FRAME)
            view = memoryview(buf)
            while recv_exact(conn, view[:4]):
                (size,) = struct.unpack_from(">i", buf, 0)
                read = self._produce_head_apart if self.head_apart else self._frame
                reply = read(conn, view, size)
                if reply is None:
                    return
                if reply:
                    conn.sendall(reply)

    def _frame(self, conn, view: memoryview, size: int) -> bytes | None:
        if not recv_exact(conn, view[:size]):
            return None
        api_key, version, corr = struct.unpack_from(">hhi", view, 0)
        if api_key != 0:
            return self.admin._admin(view[:size], api_key, version)
        p, acks, topic, index, records = self._produce_head(view)
        if self.check_crc and not batches_valid(view, p, p + records):
            raise ValueError("CRC mismatch")
        with self.lock:
            self.sink.write(view[p : p + records])
            base = self._advance(view, p)
        return produce_reply(version, corr, topic, index, base) if acks else b""

    def _produce_head_apart(self, conn, view: memoryview, size: int) -> bytes | None:
        """The request's head read field by field into ``view`` (4 small receives), its records into
        the mapped file (or spliced to it)."""
        if not recv_exact(conn, view[:10]):
            return None
        api_key, version, corr, client_len = struct.unpack_from(">hhih", view, 0)
        if api_key != 0:
            if not recv_exact(conn, view[10:size]):
                return None
            return self.admin._admin(view[:size], api_key, version)
        head = 10 + max(client_len, 0)  # past the client id
        if not recv_exact(conn, view[10 : head + 2]):  # client id, transactional id length
            return None
        p = head + 2 + max(struct.unpack_from(">h", view, head)[0], 0)  # past the transactional id
        # transactional id, acks, timeout, topic count, topic name length
        if not recv_exact(conn, view[head + 2 : p + 12]):
            return None
        (name_len,) = struct.unpack_from(">h", view, p + 10)
        if not recv_exact(conn, view[p + 12 : p + 24 + name_len]):  # name, partition count, index, size
            return None
        p, acks, topic, index, records = self._produce_head(view)
        if p + records != size:
            raise ValueError(f"{self.kind} takes one partition a request")
        with self.lock:
            if isinstance(self.sink, SpliceSink):
                base, start = self.next_offset, self.sink.pos
                self.next_offset += self.sink.splice_from(conn, records)  # offsets: not read here
                if self.check_crc and not self.sink.read_back(start, records, batches_valid):
                    raise ValueError("CRC mismatch")
                return produce_reply(version, corr, topic, index, base) if acks else b""
            region = self.sink.region(records)
            if not recv_exact(conn, region):
                return None
            if self.check_crc and not batches_valid(region, 0, records):
                raise ValueError("CRC mismatch")
            base = self._advance(region, 0)
            region.release()
            self.sink.commit(records)
        return produce_reply(version, corr, topic, index, base) if acks else b""

    @staticmethod
    def _produce_head(view) -> tuple[int, int, bytes, int, int]:
        """(records start, acks, topic as sent, partition index, records size) of a one-partition
        Produce v3-v7 request."""
        unpack = struct.unpack_from
        p = 10 + max(unpack(">h", view, 8)[0], 0)
        p += 2 + max(unpack(">h", view, p)[0], 0)
        (acks,) = unpack(">h", view, p)
        p += 10  # acks, timeout, topic count
        (name_len,) = unpack(">h", view, p)
        topic = bytes(view[p : p + 2 + name_len])
        p += 2 + name_len + 4  # name, partition count
        index, records = unpack(">ii", view, p)
        return p + 8, acks, topic, index, records

    def _advance(self, view, start: int) -> int:
        base = self.next_offset
        self.next_offset += struct.unpack_from(">i", view, start + 23)[0] + 1  # lastOffsetDelta
        return base


def _floor_main(kind: str, port: str, path: str) -> None:
    server = FloorServer(kind, int(port), path)
    listener = socket.create_server(("127.0.0.1", int(port)))
    import signal

    def stop(*_):
        server.sink.close()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=server.serve, args=(conn,), daemon=True).start()


class FloorProcess(bench.CeilingProcess):
    def __enter__(self):
        args = [sys.executable, __file__, "_floor", self.kind, str(self.port), self.path]
        self.proc = subprocess.Popen(args)
        bench.wait_port(self.port)
        return self


# ------------------------------------------------------------------------------------------------
# rounds


def one_run(kind: str, load, pure_python: bool) -> tuple[float, float, float]:
    """(user s, system s, elapsed s) of one server over one load: ``load(port, topic)``."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "data.log")
        if kind == "broker":
            env = {"MINIBROKER_PURE_PYTHON": "1"} if pure_python else None
            server = bench.BrokerProcess(env=env)
        elif kind == "reference":
            server = bench.CeilingProcess("kafka-append:1", path)
        else:
            server = FloorProcess(kind, path)
        with server:
            pid = server.proc.pid
            if kind == "broker":
                bench.create_topic(server.port, "raw")
                bench.create_topic(server.port, "k")
            u0, s0 = cpu_split(pid)
            elapsed = load(server.port)
            u1, s1 = cpu_split(pid)
    return u1 - u0, s1 - s0, elapsed


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_floor":
        _floor_main(*argv[1:4])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--frames", type=int, default=600, help="raw ~1 MiB Produce frames a run (0: none)")
    ap.add_argument("--kcat-records", type=int, default=0, help="1 KiB records kcat produces a run (0: none)")
    ap.add_argument("--only", help="comma-separated servers: " + ",".join(KINDS))
    ap.add_argument("--pure-python", action="store_true", help="the broker with MINIBROKER_PURE_PYTHON=1")
    ap.add_argument("--out", help="also write the results as JSON here")
    opts = ap.parse_args(argv)
    kinds = opts.only.split(",") if opts.only else list(KINDS)
    if "reference" not in kinds:
        kinds.insert(0, "reference")
    loads = {}
    if opts.frames:
        frames = bench.produce_frames("raw", 1, 1024, 960, Compression.NONE, version=7)
        records_bytes = FloorServer._produce_head(memoryview(frames[0])[4:])[4]
        loads["raw"] = (
            lambda port: bench.run_generator(port, frames, opts.frames),
            records_bytes * opts.frames / 1e9,
        )
    kcat_path = None
    if opts.kcat_records:
        kcat = shutil.which("kcat") or shutil.which("kafkacat")
        with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
            for i in range(0, opts.kcat_records, 1000):
                n = min(1000, opts.kcat_records - i)
                f.write(b"".join(os.urandom(512).hex().encode() + b"\n" for _ in range(n)))
            kcat_path = f.name
        loads["kcat"] = (
            lambda port: bench.kcat_produce(kcat, f"127.0.0.1:{port}", kcat_path),
            opts.kcat_records * 1024 / 1e9,
        )
    runs = {(load, kind): [] for load in loads for kind in kinds}
    try:
        for r in range(opts.rounds):
            order = kinds[r % len(kinds):] + kinds[: r % len(kinds)]
            for load, (fn, _) in loads.items():
                for kind in order:
                    runs[load, kind].append(one_run(kind, fn, opts.pure_python))
            print(f"round {r + 1}/{opts.rounds} done, load average {os.getloadavg()[0]:.2f}", file=sys.stderr)
    finally:
        if kcat_path:
            os.unlink(kcat_path)
    out = {"load_average_end": os.getloadavg(), "rounds": opts.rounds, "results": {}}
    for load, (_, gb) in loads.items():
        ref = statistics.median((u + s) / gb for u, s, _ in runs[load, "reference"])
        print(f"\n{load} load: {gb:.3f} GB of records a run, median of {opts.rounds} rounds")
        print(f"{'server':18} {'cpu s/GB':>9} {'user':>6} {'sys':>6} {'x ref':>6} {'GB/s':>6}  (min-max)")
        res = out["results"][load] = {}
        for kind in kinds:
            v = runs[load, kind]
            cpu = [(u + s) / gb for u, s, _ in v]
            med = statistics.median(cpu)
            res[kind] = {
                "cpu_s_per_GB": bench.stats(cpu),
                "user_s_per_GB": statistics.median(u / gb for u, _, _ in v),
                "sys_s_per_GB": statistics.median(s / gb for _, s, _ in v),
                "GB_per_s": statistics.median(gb / e for _, _, e in v),
                "ratio_to_reference": med / ref,
            }
            x = res[kind]
            print(f"{kind:18} {med:9.3f} {x['user_s_per_GB']:6.3f} {x['sys_s_per_GB']:6.3f} "
                  f"{x['ratio_to_reference']:6.2f} {x['GB_per_s']:6.2f}  ({min(cpu):.3f}-{max(cpu):.3f})")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in out['load_average_end'])}")
    if opts.out:
        bench.print_report(out, opts.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
