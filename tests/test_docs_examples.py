"""Every code block of README.md and docs/*.md runs as written, in a fresh project (issue 15).

What a block is, from the HTML comment just before it (invisible on GitHub) or else its language:

- ``<!-- not-run: REASON -->``: not run, for the reason given (output samples, Docker, references);
- ``<!-- file: NAME -->``: its text is the file NAME of the fresh project (a ``pyproject.toml``);
- ``<!-- same-as: PATH ... -->``: the block is the repository's PATH without its comments (checked here;
  the file itself is exercised where the comment says);
- a Python block defining ``test_*`` functions: a test file of the fresh project; all of them run in one
  ``pytest -W error::DeprecationWarning``, which must pass and print no warning;
- any other Python block: a script, run with the project's ``python``;
- an ``sh``/``bash``/``shell`` block, or an indented one: commands, run with ``bash -e -o pipefail`` in
  a copy of this checkout (where a reader who cloned it types them); a block that starts
  ``minibroker serve`` keeps running in the background (until the broker is ready) for the blocks after
  it, which talk to it at ``127.0.0.1:9092`` exactly as written (docs/teaching.md starts a second one,
  on its own port and data dir, for its lesson).

Any other block fails ``test_every_block_is_run_or_marked``: nothing is skipped without a reason.

The fresh project is a new virtualenv (``python -m venv``, no system site packages) holding only what the
blocks install themselves: the README's ``pip install .`` and docs/testing.md's ``pip install ...``.
Blocks run in document order (README.md, then docs/*.md by name), the pytest run last. They run in a
private network namespace (``unshare -rn``), so the broker can take 127.0.0.1:9092 whatever else runs on
this machine; without user namespaces they run here, when 9092 is free. The namespace has no network, so
every ``pip install`` block's packages are fetched beforehand with ``pip download`` into a wheelhouse,
and pip runs with ``PIP_NO_INDEX=1 PIP_FIND_LINKS=<wheelhouse>``: the commands stay as written.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]

FENCE_RE = re.compile(r"^( {0,3})(`{3,}|~{3,})\s*([\w+-]*)")
LIST_ITEM_RE = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s")
MARKER_RE = re.compile(r"<!--\s*(not-run|file|same-as):\s*(.*?)\s*-->", re.S)
TEST_FUNCTION_RE = re.compile(r"^(?:async\s+)?def test_\w*\(", re.M)
SHELL_LANGS = ("sh", "bash", "shell")
READY_RE = re.compile(r"minibroker ready: .* listening on")
STEP_TIMEOUT_S = 300

pytestmark = pytest.mark.xdist_group("docs-examples")  # one worker builds the fresh project (docs_run)


@dataclass(frozen=True)
class Block:
    doc: str
    line: int  # of the opening fence, or of an indented block's first line
    lang: str  # "" when unlabelled or indented
    text: str
    indented: bool
    marker: tuple[str, str] | None  # (not-run | file | same-as, argument)

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def kind(self) -> str:
        if self.marker is not None:
            return self.marker[0]
        if self.lang == "python":
            return "pytest" if TEST_FUNCTION_RE.search(self.text) else "python"
        if self.lang in SHELL_LANGS or (self.indented and not self.lang):
            return "shell"
        return "unrunnable"

    @property
    def serves(self) -> bool:
        """A shell block that starts the broker and keeps it running."""
        starts = re.search(r"(^|&&|;)\s*minibroker serve\b", self.text, re.M)
        return self.kind == "shell" and starts is not None


def _marker_before(lines: list[str], i: int) -> tuple[str, str] | None:
    j = i - 1
    while j >= 0 and not lines[j].strip():
        j -= 1
    if j < 0 or not lines[j].rstrip().endswith("-->"):
        return None
    k = j
    while k > 0 and "<!--" not in lines[k]:
        k -= 1
    m = MARKER_RE.search("\n".join(lines[k:j + 1]))
    return (m.group(1), " ".join(m.group(2).split())) if m else None


def parse_blocks(doc: str, text: str) -> list[Block]:
    """Fenced blocks anywhere, and indented blocks after a blank line outside lists (CommonMark: four
    spaces after a list item continue the item, they are no code)."""
    lines = text.split("\n")
    blocks: list[Block] = []
    i, prev_blank, in_list = 0, True, False
    while i < len(lines):
        line = lines[i]
        m = FENCE_RE.match(line)
        if m:
            indent, fence, lang = m.groups()
            body, j = [], i + 1
            while j < len(lines) and not (lines[j].strip().startswith(fence)
                                          and not lines[j].strip().strip(fence[0])):
                body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j].lstrip())
                j += 1
            blocks.append(Block(doc, i + 1, lang, "\n".join(body) + "\n", False, _marker_before(lines, i)))
            i, prev_blank = j + 1, False
            continue
        if line.startswith("    ") and line.strip() and prev_blank and not in_list:
            body, j = [], i
            while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
                body.append(lines[j][4:])
                j += 1
            while body and not body[-1].strip():
                body.pop()
            blocks.append(Block(doc, i + 1, "", "\n".join(body) + "\n", True, _marker_before(lines, i)))
            i, prev_blank = j, True
            continue
        if LIST_ITEM_RE.match(line):
            in_list = True
        elif line.strip() and not line.startswith(" "):
            in_list = False
        prev_blank = not line.strip()
        i += 1
    return blocks


def all_blocks() -> list[Block]:
    return [b for doc in DOCS for b in parse_blocks(doc, (ROOT / doc).read_text(encoding="utf-8"))]


BLOCKS = all_blocks()
RUN_KINDS = ("shell", "python", "pytest")


def strip_comments(text: str) -> list[str]:
    out = []
    for line in text.splitlines():
        if not line.strip() or line.strip().startswith("#"):
            continue
        out.append(re.sub(r"\s+#.*$", "", line).rstrip())
    return out


# ---------------------------------------------------------------------------------------------------
# Fast checks: every block is accounted for.


def test_parser_reads_fences_indented_blocks_lists_and_markers():
    text = "\n".join([
        "Intro:", "", "    cmd one", "    cmd two", "", "- a list item", "", "    continues the item", "",
        "<!-- not-run: an output", "sample -->", "```", "out", "```", "", "<!-- file: pyproject.toml -->",
        "~~~toml", "[x]", "~~~", "", "```python", "def test_x():", "    pass", "```",
        "    not code: no blank line before",
    ])
    blocks = parse_blocks("doc.md", text)
    assert [(b.line, b.kind, b.text) for b in blocks] == [
        (3, "shell", "cmd one\ncmd two\n"),
        (12, "not-run", "out\n"),
        (17, "file", "[x]\n"),
        (21, "pytest", "def test_x():\n    pass\n"),
    ]
    assert blocks[1].marker == ("not-run", "an output sample")


def test_every_block_is_run_or_marked():
    assert len(BLOCKS) > 20, "the parser found too few blocks"
    problems = [f"{b.id}: a {b.lang or 'plain'} block that cannot be run: run it, or mark it "
                f"<!-- not-run: reason -->" for b in BLOCKS if b.kind == "unrunnable"]
    problems += [f"{b.id}: not-run without a reason" for b in BLOCKS
                 if b.kind == "not-run" and not b.marker[1]]
    files = [b.marker[1] for b in BLOCKS if b.kind == "file"]
    problems += [f"file: {name!r} is not a plain file name" for name in files
                 if not re.fullmatch(r"[\w.-]+", name)]
    problems += [f"file: {name!r} is given twice" for name in set(files) if files.count(name) > 1]
    assert not problems, "\n".join(problems)
    serving = [b for b in BLOCKS if b.serves]
    assert [b.doc for b in serving].count("README.md") == 1, "the README starts the broker, once"
    # any other broker (docs/teaching.md's) runs beside it: on a port and in a data dir of its own
    for b in serving:
        if b.doc != "README.md":
            own_port = re.search(r"listeners=PLAINTEXT://127\.0\.0\.1:(?!9092\b)\d+", b.text)
            assert own_port and "log.dirs=" in b.text, (
                f"{b.id}: a second broker needs its own listeners port and log.dirs")


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.kind == "same-as"], ids=lambda b: b.id)
def test_same_as_block_is_the_file(block):
    path = ROOT / block.marker[1].split()[0]
    assert path.is_file(), f"{block.id}: {path} does not exist"
    assert strip_comments(block.text) == strip_comments(path.read_text()), (
        f"{block.id} is no longer {path.name} (comments aside): copy the file's lines into the block")


# ---------------------------------------------------------------------------------------------------
# Running them: the workspace, the wheelhouse, the driver in its network namespace.


def pip_install_args(text: str) -> list[list[str]]:
    """The arguments of every `pip install` in a shell block (options dropped)."""
    found = []
    for line in text.replace("\\\n", " ").splitlines():
        for part in re.split(r"&&|\|\||;|\|", line):
            try:
                words = shlex.split(part, comments=True)
            except ValueError:
                continue
            if words[:2] == ["pip", "install"] or words[1:4] == ["-m", "pip", "install"]:
                rest = words[words.index("install") + 1:]
                found.append([w for w in rest if not w.startswith("-")])
    return found


def copy_checkout(dest: Path) -> None:
    """This working tree as a fresh clone would have it: .git and .gitignore'd paths left out."""
    patterns = [".git"] + [p.strip().rstrip("/") for p in (ROOT / ".gitignore").read_text().splitlines()
                           if p.strip() and not p.startswith("#")]

    def ignore(_dir, names):
        return {n for n in names if any(fnmatch.fnmatch(n, p) for p in patterns)}

    shutil.copytree(ROOT, dest, ignore=ignore)


def have_user_netns() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-rn", "true"], capture_output=True).returncode == 0


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture(scope="module")
def docs_run(tmp_path_factory):
    """Build the fresh project and run every block once; returns the driver's results."""
    ws = tmp_path_factory.mktemp("docs-examples")
    checkout, project, venv, wheels = ws / "checkout", ws / "project", ws / "venv", ws / "wheelhouse"
    copy_checkout(checkout)
    project.mkdir()
    wheels.mkdir()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]

    # fetch what the blocks' pip commands will install, while there is a network
    downloads = [args for b in BLOCKS if b.kind == "shell" for args in pip_install_args(b.text)]
    assert downloads, "no block installs anything: where did the README's pip install go?"
    for args in downloads:
        if any(a.startswith((".", "/")) for a in args):  # a source tree: its build requirements too
            requires = tomllib.loads((checkout / "pyproject.toml").read_text())["build-system"]["requires"]
            args = [*args, *requires]
        got = subprocess.run([*pip, "download", "-q", "-d", str(wheels), *args], cwd=checkout,
                             capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
        assert got.returncode == 0, f"pip download {' '.join(args)} failed:\n{got.stderr[-4000:]}"

    steps = []
    for b in BLOCKS:
        name = f"{Path(b.doc).stem}_{b.line}".replace("-", "_")
        if b.kind == "shell":
            steps.append({"id": b.id, "kind": "serve" if b.serves else "shell", "text": b.text,
                          "cwd": str(checkout)})
        elif b.kind == "python":
            (project / f"{name}.py").write_text(b.text)
            steps.append({"id": b.id, "kind": "python", "argv": ["python", f"{name}.py"],
                          "cwd": str(project)})
        elif b.kind == "pytest":
            (project / f"test_{name}.py").write_text(b.text)
        elif b.kind == "file":
            (project / b.marker[1]).write_text(b.text)
    steps.append({"id": "pytest", "kind": "python", "cwd": str(project),
                  "argv": ["pytest", "-W", "error::DeprecationWarning", "-p", "no:cacheprovider", "-rA",
                           "--junitxml=junit.xml"]})

    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KAFKA_", "MINIBROKER_", "PYTEST_", "PYTHON", "PIP_", "VIRTUAL_ENV"))}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', os.defpath)}", VIRTUAL_ENV=str(venv),
               PIP_NO_INDEX="1", PIP_FIND_LINKS=str(wheels), PIP_DISABLE_PIP_VERSION_CHECK="1")
    plan, results = ws / "plan.json", ws / "results.json"
    plan.write_text(json.dumps({"steps": steps, "env": env}))
    driver = [sys.executable, __file__, str(plan), str(results)]
    if have_user_netns():
        driver = ["unshare", "-rn", *driver]
    elif not port_free(9092):
        pytest.fail("127.0.0.1:9092 is taken and there are no user namespaces (unshare -rn) to run the "
                    "README's `minibroker serve` in: free the port")
    t0 = time.monotonic()
    proc = subprocess.run(driver, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, f"the driver failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    out = json.loads(results.read_text())
    out["seconds"] = time.monotonic() - t0
    junit = project / "junit.xml"
    out["junit"] = ET.parse(junit).getroot() if junit.exists() else None
    print(f"[docs examples] {len(steps)} steps in {out['seconds']:.1f} s "
          f"(namespace: {driver[0] == 'unshare'})")
    return out


def _report(result: dict) -> str:
    return f"exit {result['returncode']} after {result['seconds']:.1f} s; output:\n{result['output'][-6000:]}"


@pytest.mark.slow
@pytest.mark.parametrize("block", [b for b in BLOCKS if b.kind in ("shell", "python")], ids=lambda b: b.id)
def test_block_runs_as_written(docs_run, block):
    result = docs_run["steps"][block.id]
    if block.serves:
        assert result["ready"], f"{block.id} never said 'minibroker ready': {_report(result)}"
        assert result["stopped"], f"{block.id}: the broker did not stop on SIGTERM: {_report(result)}"
    else:
        assert result["returncode"] == 0, f"{block.id}: {_report(result)}"


@pytest.mark.slow
@pytest.mark.parametrize("block", [b for b in BLOCKS if b.kind == "pytest"], ids=lambda b: b.id)
def test_pytest_example_passes(docs_run, block):
    junit = docs_run["junit"]
    assert junit is not None, f"pytest wrote no report: {_report(docs_run['steps']['pytest'])}"
    module = f"test_{Path(block.doc).stem}_{block.line}".replace("-", "_")
    cases = [c for c in junit.iter("testcase") if c.get("classname") == module]
    names = set(TEST_FUNCTION_RE.findall(block.text))
    report = _report(docs_run["steps"]["pytest"])
    assert len(cases) == len(names) > 0, f"{block.id}: {len(cases)} tests ran: {report}"
    failed = [c.get("name") for c in cases if any(e.tag in ("failure", "error", "skipped") for e in c)]
    assert not failed, f"{block.id}: {failed} did not pass: {report}"


@pytest.mark.slow
def test_pytest_examples_run_without_warnings(docs_run):
    result = docs_run["steps"]["pytest"]
    assert result["returncode"] == 0, _report(result)
    summary = result["output"].strip().splitlines()[-1]
    assert "passed" in summary and "warning" not in summary, _report(result)


# ---------------------------------------------------------------------------------------------------
# The driver: runs the plan inside the network namespace (``python tests/test_docs_examples.py PLAN OUT``).


def _loopback_up() -> None:
    """A new network namespace starts with lo down (no `ip` needed: SIOCGIFFLAGS / SIOCSIFFLAGS)."""
    import fcntl
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(s, 0x8913, request))[1]
        fcntl.ioctl(s, 0x8914, struct.pack("16sh", b"lo", flags | 1))  # IFF_UP


def _drive(plan_path: str, out_path: str) -> int:
    from minibroker.server.parent_watch import watch_parent_pid
    from minibroker.testing import tied_to_this_process

    watch_parent_pid()  # pytest gone (kill -9): this driver stops, and the brokers tied to it
    plan = json.loads(Path(plan_path).read_text())
    env = plan["env"]
    try:
        _loopback_up()
    except OSError:
        pass  # not in a namespace of our own: lo is up already
    results: dict[str, dict] = {}
    servers: list[tuple[str, subprocess.Popen, list[str], float]] = []
    for step in plan["steps"]:
        t0 = time.monotonic()
        if step["kind"] == "serve":
            proc = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", step["text"]], cwd=step["cwd"],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    start_new_session=True, **tied_to_this_process(env))
            lines: list[str] = []
            ready = threading.Event()

            def pump(proc=proc, lines=lines, ready=ready):
                for line in proc.stdout:
                    lines.append(line)
                    if READY_RE.search(line):
                        ready.set()
                ready.set()  # ended: wake the waiter

            threading.Thread(target=pump, daemon=True).start()
            ready.wait(STEP_TIMEOUT_S)
            results[step["id"]] = {"ready": any(READY_RE.search(x) for x in lines), "stopped": False,
                                   "returncode": None, "output": "", "seconds": time.monotonic() - t0}
            servers.append((step["id"], proc, lines, t0))
            continue
        argv = step.get("argv") or ["bash", "-e", "-o", "pipefail", "-c", step["text"]]
        try:
            proc = subprocess.run(argv, cwd=step["cwd"], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, timeout=STEP_TIMEOUT_S,
                                  stdin=subprocess.DEVNULL)
            code, output = proc.returncode, proc.stdout
        except subprocess.TimeoutExpired as e:
            code, output = -1, f"{e.output or ''}\n[timed out after {STEP_TIMEOUT_S} s]"
        results[step["id"]] = {"returncode": code, "output": output, "seconds": time.monotonic() - t0}
    for step_id, proc, lines, t0 in servers:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
            stopped = True
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            stopped = False
        time.sleep(0.1)  # the pump thread reads the last lines
        results[step_id].update(stopped=stopped, returncode=proc.returncode, output="".join(lines),
                                seconds=time.monotonic() - t0)
    Path(out_path).write_text(json.dumps({"steps": results}))
    return 0


if __name__ == "__main__":
    sys.exit(_drive(sys.argv[1], sys.argv[2]))
