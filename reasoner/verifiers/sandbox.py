"""Run model-written Python (`transform(x)`) on held-out tests, each test in its own locked-down process.

This is the executable verifier of CEDAR-GRPO's Crypto and ListFunction tasks (Table 8): the
answer's code must return the expected output on every held-out test, 5 s per test.

Layers, outermost first (each one is tested):
  * a new network namespace (`unshare --net`: only a down loopback, so nothing is reachable) and a
    new PID namespace (`--pid --fork --kill-child`: when the test ends, every process it started
    dies with it); where `unshare` is not permitted, socket creation is refused by the audit hook
    and the process group is killed instead (`isolation` says which one was used);
  * as root, the payload runs as `nobody` (uid 65534) when a world-executable interpreter exists
    (`/usr/bin/python3`), so RLIMIT_NPROC applies (root ignores it) and file permissions hold;
  * rlimits: RLIMIT_AS (memory), RLIMIT_CPU, RLIMIT_FSIZE (file size), RLIMIT_NPROC (processes);
  * a fresh temporary working directory, removed afterwards, and an environment with no inherited
    variables (no tokens or keys leak), `python -I -S` (no site, no user paths);
  * the audit hook of `sandbox_child` (no process creation, no writes outside the directory, no
    ctypes); output beyond `max_output_bytes` is an error.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import resource
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

from reasoner.verifiers.pool import descendant_pids

NOBODY = 65534
_CHILD_SOURCE = (pathlib.Path(__file__).with_name("sandbox_child.py")).read_text()
_UNSHARE_OK: dict[tuple, bool] = {}


@dataclasses.dataclass(frozen=True)
class SandboxLimits:
    timeout_s: float = 5.0
    memory_mb: int = 256
    max_file_mb: int = 8
    max_processes: int = 16
    max_output_bytes: int = 1 << 20


@dataclasses.dataclass(frozen=True)
class TestOutcome:
    index: int
    passed: bool
    got: object = None
    error: str | None = None
    elapsed_s: float = 0.0


@dataclasses.dataclass(frozen=True)
class SandboxReport:
    passed_all: bool
    tests: tuple[TestOutcome, ...]
    isolation: str

    @property
    def pass_count(self) -> int:
        return sum(t.passed for t in self.tests)


def _world_executable(path: str) -> bool:
    real = pathlib.Path(os.path.realpath(path))
    if not real.is_file() or not real.stat().st_mode & stat.S_IXOTH:
        return False
    return all(p.stat().st_mode & stat.S_IXOTH for p in real.parents)


def choose_interpreter() -> tuple[str, bool]:
    """(python executable, drop_to_nobody). As root, prefer an interpreter `nobody` can execute."""
    if os.geteuid() == 0:
        for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
            if _world_executable(candidate):
                return candidate, True
    return sys.executable, False


def unshare_works(drop: bool) -> bool:
    """Whether `unshare --net --pid` runs here (needs CAP_SYS_ADMIN, e.g. root in the container)."""
    key = (drop,)
    if key not in _UNSHARE_OK:
        cmd = _namespace_prefix(drop) + ["/bin/true"]
        try:
            _UNSHARE_OK[key] = shutil.which("unshare") is not None and subprocess.run(
                cmd, capture_output=True, timeout=10).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            _UNSHARE_OK[key] = False
    return _UNSHARE_OK[key]


def _namespace_prefix(drop: bool) -> list[str]:
    prefix = ["unshare", "--net", "--pid", "--fork", "--kill-child"]
    if drop:
        prefix += ["--setuid", str(NOBODY), "--setgid", str(NOBODY)]
    return prefix + ["--"]


def _limit_child(limits: SandboxLimits):
    def apply() -> None:
        mb = 1024 * 1024
        cpu = int(limits.timeout_s) + 1
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_mb * mb, limits.memory_mb * mb))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.max_file_mb * mb, limits.max_file_mb * mb))
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.max_processes, limits.max_processes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


def _kill_tree(proc: subprocess.Popen) -> None:
    """Kill the test's processes so that none is left, not even as a zombie.

    The payload's processes are killed before their parent (`unshare`, or the interpreter itself),
    so that the parent reaps them; killing the parent first would orphan them to a PID 1 that may
    never reap (a container's init). The process group is then killed as a backstop.
    """
    children = descendant_pids(proc.pid)
    for pid in sorted(children, reverse=True):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if children:  # `unshare` exits by itself once the namespace's init is gone, reaping it
        try:
            proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _run_one(*, code: str, entry: str, value, limits: SandboxLimits, command: list[str],
             workdir: str, block_sockets: bool) -> tuple[object, str | None, float]:
    """(returned value, error or None, seconds) for one call of `entry(value)` in a fresh process."""
    request = json.dumps({"code": code, "entry": entry, "input": value, "block_sockets": block_sockets})
    env = {"PATH": "/usr/bin:/bin", "HOME": workdir, "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, cwd=workdir, env=env, start_new_session=True,
                            preexec_fn=_limit_child(limits), close_fds=True)
    chunks, size, error = [], 0, None
    try:
        proc.stdin.write(request.encode())
        proc.stdin.close()
        deadline = start + limits.timeout_s
        fd = proc.stdout.fileno()
        while True:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                error = f"timeout: no result within {limits.timeout_s:g} s"
                break
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limits.max_output_bytes:
                error = f"output larger than {limits.max_output_bytes} bytes"
                break
    except BrokenPipeError:
        pass
    finally:
        _kill_tree(proc)
        proc.stdout.close()
    elapsed = time.perf_counter() - start
    if error:
        return None, error, elapsed
    try:
        reply = json.loads(b"".join(chunks))
    except ValueError:
        return None, f"the test process died without a result (exit status {proc.returncode})", elapsed
    if not reply.get("ok"):
        return None, reply.get("error"), elapsed
    return reply.get("value"), None, elapsed


def run_transform_tests(code: str, tests: list[tuple[object, object]], *, entry: str = "transform",
                        limits: SandboxLimits | None = None, network: str = "auto") -> SandboxReport:
    """Run `entry(input)` from `code` on each (input, expected) pair; inputs/outputs are JSON values.

    `network`: "auto" (namespace if `unshare` works, else socket blocking) or "block" (force the
    fallback). A test passes when the returned value equals `expected` after a JSON round trip.
    """
    if not isinstance(code, str):
        raise TypeError(f"code must be str, got {type(code).__name__}")
    if network not in ("auto", "block"):
        raise ValueError(f"network must be 'auto' or 'block', got {network!r}")
    limits = limits or SandboxLimits()
    python, drop = choose_interpreter()
    use_namespace = network == "auto" and unshare_works(drop)
    if not use_namespace:
        drop = False
        python = sys.executable if not os.path.exists(python) else python
    command = ([*_namespace_prefix(drop)] if use_namespace else []) + [python, "-I", "-S", "-c", _CHILD_SOURCE]
    outcomes = []
    for index, (value, expected) in enumerate(tests):
        workdir = tempfile.mkdtemp(prefix="sandbox-")
        if drop:
            os.chown(workdir, NOBODY, NOBODY)
        try:
            got, error, elapsed = _run_one(code=code, entry=entry, value=value, limits=limits,
                                           command=command, workdir=workdir,
                                           block_sockets=not use_namespace)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        expected_json = json.loads(json.dumps(expected))
        passed = error is None and got == expected_json
        if error is None and not passed:
            error = f"wrong output: expected {expected_json!r}, got {got!r}"[:2000]
        outcomes.append(TestOutcome(index=index, passed=passed, got=got, error=error, elapsed_s=elapsed))
    isolation = ("netns+pidns" + ("+nobody" if drop else "")) if use_namespace else "audit-hook"
    return SandboxReport(passed_all=bool(outcomes) and all(o.passed for o in outcomes),
                         tests=tuple(outcomes), isolation=isolation)


_ANSWER_SPAN = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.DOTALL)
_FENCE = re.compile(r"^\s*```[\w+-]*\s*\n(.*?)\n?\s*```\s*$", re.DOTALL)


def extract_answer_code(text: str) -> str:
    """The code of a CEDAR-style answer: the last `<answer>...</answer>` span (the whole text when
    there is none), with an optional Markdown fence (```python ... ```) removed."""
    spans = _ANSWER_SPAN.findall(text)
    code = spans[-1] if spans else text
    fenced = _FENCE.match(code)
    return (fenced.group(1) if fenced else code).strip("\n")


def verify_transform_answer(answer_text: str, tests: list[tuple[object, object]], **kwargs) -> SandboxReport:
    """CEDAR's Crypto / ListFunction verifier: extract the code, then `run_transform_tests`."""
    return run_transform_tests(extract_answer_code(answer_text), tests, **kwargs)
