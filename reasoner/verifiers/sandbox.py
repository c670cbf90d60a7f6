"""Run model-written Python (`transform(x)`) on held-out tests, each test in its own locked-down process.

This is the executable verifier of CEDAR-GRPO's Crypto and ListFunction tasks (Table 8): the
answer's code must return the expected output on every held-out test, 5 s per test.

Isolation never rests on Python state the payload can reach. Layers, outermost first (the report
says which were active, `isolation_report()` says which this host gives):
  * namespaces (`unshare --net --pid --mount --fork --kill-child --mount-proc`): no network (only
    a down loopback), its own PID space (every process it starts dies with the test), and a mount
    namespace in which host directories are hidden, `/` is read-only and the only writable place
    is a private tmpfs /tmp that vanishes with the test (see `sandbox_child.lock_down`);
  * uid/gid nobody with no capabilities (as root: always; the interpreter need not be nobody's);
  * rlimits: RLIMIT_AS (memory), CPU, FSIZE, NPROC, NOFILE, CORE=0;
  * a seccomp filter: no fork / exec / socket / ptrace / mount / namespaces (threads stay allowed);
  * the audit hook of `sandbox_child`, the last layer.
`mode="strict"` (the default) refuses to run code where the namespaces are not available;
`mode="weak"` is the explicit opt-in for such hosts: uid nobody (never root), rlimits, seccomp,
the audit hook with sockets blocked, and a host temporary directory as working directory.

Each `TestOutcome.limit` names the limit that stopped the test: "timeout" (wall clock), "cpu"
(RLIMIT_CPU), "memory", "output" (reply beyond `max_output_bytes`), "file_size", "nproc",
"nofile", "recursion", "permission" (EPERM: seccomp or the uid refused a syscall), "audit_hook",
"read_only" (EROFS: the mount namespace), "lock_down" (the jail could not be built); None otherwise.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import pathlib
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
MODES = ("strict", "weak")
_CHILD_SOURCE = (pathlib.Path(__file__).with_name("sandbox_child.py")).read_text()
NAMESPACE_PREFIX = ("unshare", "--net", "--pid", "--mount", "--fork", "--kill-child", "--mount-proc", "--")


class SandboxUnavailable(RuntimeError):
    """Strict mode was asked for on a host where the namespaces cannot be created."""


@dataclasses.dataclass(frozen=True)
class SandboxLimits:
    """Per-test limits; a test stopped by one has its name (quoted below) as `TestOutcome.limit`."""

    timeout_s: float = 5.0
    """Wall-clock seconds per test, then its process tree is killed ("timeout"; CEDAR: 5 s per test)."""
    memory_mb: int = 256
    """RLIMIT_AS of the test process in MB ("memory")."""
    max_file_mb: int = 8
    """RLIMIT_FSIZE in MB: the largest file the test may write ("file_size")."""
    max_processes: int = 16
    """RLIMIT_NPROC: processes and threads of the test's user ("nproc")."""
    max_output_bytes: int = 1 << 20
    """Bytes of the test's reply read at most ("output")."""
    cpu_s: int | None = None
    """RLIMIT_CPU seconds: SIGXCPU, SIGKILL one later ("cpu"); None: `int(timeout_s) + 1` (the wall clock first)."""
    max_open_files: int = 64
    """RLIMIT_NOFILE: open file descriptors ("nofile")."""
    scratch_mb: int = 16
    """MB of the private tmpfs /tmp, the only writable place ("strict" mode; "weak" uses a host temporary dir)."""

    def __post_init__(self):
        for name in ("timeout_s", "memory_mb", "max_file_mb", "max_processes", "max_output_bytes",
                     "max_open_files", "scratch_mb"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"SandboxLimits.{name} must be a positive number, got {value!r}")
        if self.cpu_s is not None and (not isinstance(self.cpu_s, int) or self.cpu_s < 1):
            raise ValueError(f"SandboxLimits.cpu_s must be an int >= 1 or None, got {self.cpu_s!r}")

    @property
    def cpu_limit_s(self) -> int:
        return self.cpu_s if self.cpu_s is not None else int(self.timeout_s) + 1


@dataclasses.dataclass(frozen=True)
class TestOutcome:
    index: int
    passed: bool
    got: object = None
    error: str | None = None
    elapsed_s: float = 0.0
    limit: str | None = None


@dataclasses.dataclass(frozen=True)
class SandboxReport:
    passed_all: bool
    tests: tuple[TestOutcome, ...]
    isolation: str
    layers: tuple[tuple[str, bool], ...] = ()

    @property
    def pass_count(self) -> int:
        return sum(t.passed for t in self.tests)


def _world_executable(path: str) -> bool:
    real = pathlib.Path(os.path.realpath(path))
    if not real.is_file() or not real.stat().st_mode & stat.S_IXOTH:
        return False
    return all(p.stat().st_mode & stat.S_IXOTH for p in real.parents)


def choose_interpreter() -> tuple[str, bool]:
    """(python executable, drop_to_nobody). As root, prefer an interpreter whose files `nobody` can
    read (its standard library is imported lazily after the uid drop)."""
    if os.geteuid() == 0:
        for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
            if _world_executable(candidate):
                return candidate, True
    return sys.executable, os.geteuid() == 0


@functools.lru_cache(maxsize=None)
def unshare_works() -> bool:
    """Whether `unshare --net --pid --mount --mount-proc` runs here (root or CAP_SYS_ADMIN)."""
    if shutil.which("unshare") is None:
        return False
    try:
        return subprocess.run([*NAMESPACE_PREFIX, "/bin/true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


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


@dataclasses.dataclass(frozen=True)
class _Run:
    value: object = None
    error: str | None = None
    limit: str | None = None
    layers: dict | None = None
    elapsed_s: float = 0.0


def _exit_limit(code: int | None, limits: SandboxLimits, elapsed: float) -> str | None:
    """The limit a death without a reply shows: SIGXCPU, or SIGKILL at the hard CPU limit."""
    if code in (-signal.SIGXCPU, 128 + signal.SIGXCPU):
        return "cpu"
    if code in (-signal.SIGKILL, 128 + signal.SIGKILL) and elapsed >= limits.cpu_limit_s:
        return "cpu"
    return None


def _run_one(*, request: dict, limits: SandboxLimits, command: list[str], workdir: str) -> _Run:
    """One call of `entry(input)` in a fresh process; reads the layers line, then the reply."""
    env = {"PATH": "/usr/bin:/bin", "HOME": workdir, "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, cwd=workdir if os.path.isdir(workdir) else "/",
                            env=env, start_new_session=True, close_fds=True)
    chunks, size, error, limit = [], 0, None, None
    try:
        proc.stdin.write(json.dumps(request).encode())
        proc.stdin.close()
        deadline = start + limits.timeout_s
        fd = proc.stdout.fileno()
        while True:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                error, limit = f"timeout: no result within {limits.timeout_s:g} s", "timeout"
                break
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limits.max_output_bytes + 4096:  # + the layers line
                error, limit = f"output larger than {limits.max_output_bytes} bytes", "output"
                break
    except BrokenPipeError:
        pass
    finally:
        _kill_tree(proc)
        proc.stdout.close()
    elapsed = time.perf_counter() - start
    head, _, body = b"".join(chunks).partition(b"\n")
    try:
        first = json.loads(head)
        layers = first.get("layers")
    except ValueError:
        first, layers = {}, None
    if error:
        return _Run(error=error, limit=limit, layers=layers, elapsed_s=elapsed)
    if layers is None:
        return _Run(error=first.get("error") or f"the test process failed to start (exit status {proc.returncode})",
                    limit="lock_down", elapsed_s=elapsed)
    try:
        reply = json.loads(body)
    except ValueError:
        limit = _exit_limit(proc.returncode, limits, elapsed)
        reason = f" (CPU limit of {limits.cpu_limit_s} s)" if limit == "cpu" else ""
        return _Run(error=f"the test process died without a result (exit status {proc.returncode}){reason}",
                    limit=limit, layers=layers, elapsed_s=elapsed)
    if not reply.get("ok"):
        return _Run(error=reply.get("error"), limit=reply.get("limit"), layers=layers, elapsed_s=elapsed)
    return _Run(value=reply.get("value"), layers=layers, elapsed_s=elapsed)


def _plan(mode: str) -> tuple[list[str], bool, list[str]]:
    """(command, use_namespaces, paths to expose) for `mode`; raises SandboxUnavailable."""
    python, drop = choose_interpreter()
    if mode == "strict":
        if not unshare_works():
            raise SandboxUnavailable(
                "the code sandbox needs `unshare --net --pid --mount` (root or CAP_SYS_ADMIN) and it failed "
                "here; pass mode='weak' to run with uid nobody, rlimits, seccomp and the audit hook only")
        expose = [] if python.startswith(("/usr/", "/bin/")) else [sys.base_prefix, sys.prefix]
        return [*NAMESPACE_PREFIX, python, "-I", "-S", "-c", _CHILD_SOURCE], True, expose
    if os.geteuid() == 0 and not drop:
        raise SandboxUnavailable("weak mode runs code as nobody, never as root, and no interpreter "
                                 "nobody can execute was found (/usr/bin/python3)")
    return [python, "-I", "-S", "-c", _CHILD_SOURCE], False, []


def _same_json(got, expected) -> bool:
    """Whether two JSON values are written the same (object keys in any order): bool, int and float differ."""
    return json.dumps(got, sort_keys=True) == json.dumps(expected, sort_keys=True)


def run_transform_tests(code: str, tests: list[tuple[object, object]], *, entry: str = "transform",
                        limits: SandboxLimits | None = None, mode: str = "strict",
                        network: str | None = None, audit_hook: bool = True) -> SandboxReport:
    """Run `entry(input)` from `code` on each (input, expected) pair; inputs/outputs are JSON values.

    A test passes when the returned value and `expected` are the same JSON text (`_same_json`): Python's `==`
    would let `True` pass for 1, `1.0` for 1 and `[True]` for [1]. `mode` is
    "strict" (namespaces required, else SandboxUnavailable) or "weak" (see the module docstring).
    `network` is the older spelling: "auto" = strict, "block" = weak. `audit_hook=False` leaves
    out the last layer (tests use it to show that the walls below hold on their own).
    """
    if not isinstance(code, str):
        raise TypeError(f"code must be str, got {type(code).__name__}")
    if network is not None:
        if network not in ("auto", "block"):
            raise ValueError(f"network must be 'auto' or 'block', got {network!r}")
        mode = "strict" if network == "auto" else "weak"
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    limits = limits or SandboxLimits()
    command, use_namespace, expose = _plan(mode)
    lock = {"mount_ns": use_namespace, "scratch_mb": limits.scratch_mb, "expose": expose,
            "memory_mb": limits.memory_mb, "cpu_s": limits.cpu_limit_s, "file_mb": limits.max_file_mb,
            "nproc": limits.max_processes, "nofile": limits.max_open_files}
    outcomes, layers = [], {}
    for index, (value, expected) in enumerate(tests):
        workdir = "/tmp" if use_namespace else tempfile.mkdtemp(prefix="sandbox-")
        if not use_namespace and os.geteuid() == 0:
            os.chown(workdir, NOBODY, NOBODY)
        try:
            run = _run_one(request={"code": code, "entry": entry, "input": value, "lock": lock,
                                    "audit_hook": bool(audit_hook)},
                           limits=limits, command=command, workdir=workdir)
        finally:
            if not use_namespace:
                shutil.rmtree(workdir, ignore_errors=True)
        layers = run.layers or layers
        expected_json = json.loads(json.dumps(expected))
        passed = run.error is None and _same_json(run.value, expected_json)
        error = run.error
        if error is None and not passed:
            error = f"wrong output: expected {expected_json!r}, got {run.value!r}"[:2000]
        outcomes.append(TestOutcome(index=index, passed=passed, got=run.value, error=error,
                                    elapsed_s=run.elapsed_s, limit=run.limit))
    isolation = "+".join(name for name, active in layers.items() if active) or "none"
    return SandboxReport(passed_all=bool(outcomes) and all(o.passed for o in outcomes),
                         tests=tuple(outcomes), isolation=isolation, layers=tuple(sorted(layers.items())))


EXPECTED_LAYERS = ("netns+pidns+mountns", "uid", "rlimits", "seccomp", "audit_hook")


def isolation_report(mode: str = "strict") -> dict[str, bool]:
    """{layer: active} for a trivial payload run here in `mode`: what CI checks against
    EXPECTED_LAYERS. Every layer is False when the mode cannot run at all on this host."""
    try:
        report = run_transform_tests("def transform(x):\n    return x\n", [(0, 0)],
                                     limits=SandboxLimits(timeout_s=30.0), mode=mode)
    except SandboxUnavailable:
        return {name: False for name in EXPECTED_LAYERS}
    return {name: dict(report.layers).get(name, False) for name in EXPECTED_LAYERS}


def extract_answer_code(text: str) -> str:
    """The code of a CEDAR answer, read as CEDAR's correctness reads it (`reasoner.tasks.cedar_verify.answer_code`:
    the first fenced block of the first complete `<answer>` span, tags in any case; "" without such a span). One
    extractor for the sandbox, training rewards and `reasoner cedar check|eval`."""
    from reasoner.tasks.cedar_verify import answer_code

    return answer_code(text)


def verify_transform_answer(answer_text: str, tests: list[tuple[object, object]], **kwargs) -> SandboxReport:
    """CEDAR's Crypto / ListFunction verifier: extract the code, then `run_transform_tests`."""
    return run_transform_tests(extract_answer_code(answer_text), tests, **kwargs)
