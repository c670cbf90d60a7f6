"""Code sandbox for model-written `transform(x)`: per-test verdicts, strict and weak modes, the
isolation layers, and every hostile payload of issue 16 item 4, each asserting the one limit or
outcome that should stop it, within its deadline + 1 s, leaving no process and no file behind.

Payloads marked `walls` also run with the audit hook left out: the namespaces, uid, rlimits and
seccomp must stop them on their own (the hook is the last layer, not the wall)."""

import errno
import os
import socket
import threading
import time

import pytest

from reasoner.verifiers import sandbox
from reasoner.verifiers.pool import VerifierPool, descendant_pids
from reasoner.verifiers.sandbox import (EXPECTED_LAYERS, SandboxLimits, SandboxUnavailable, isolation_report,
                                        run_transform_tests, unshare_works)

DOUBLE = "def transform(lst):\n    return [2 * x for x in lst]\n"
TESTS = [([1, 2], [2, 4]), ([], []), ([5], [10])]
LIMITS = SandboxLimits(timeout_s=2.0)
STRICT = pytest.mark.skipif(not unshare_works(), reason="unshare --net --pid --mount is not permitted here")
PROBE = "/tmp/sandbox_escape_probe.txt"


def _status(pid: str) -> dict[str, str]:
    with open(f"/proc/{pid}/status") as f:
        return dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)


def _others_descendant(pid: str, status: dict) -> bool:
    """Whether `pid` descends from the test run's controller through another of its children than this process:
    another xdist worker's sandboxes and jailed Z3 pool workers (uid nobody too, alive for as long as their test
    keeps its pool). Ours descend through this process; a leaked double-forked child is reparented away from both."""
    here, controller = str(os.getpid()), str(os.getppid())
    while True:
        parent = status.get("PPid", "0").strip()
        if parent == here:
            return False
        if parent == controller:
            return pid != here
        if parent in ("0", "1"):
            return False
        pid, status = parent, _status(parent)


def nobody_processes() -> int:
    """Live processes of uid 65534 (zombies excluded) that are not another test worker's: what a finished sandbox
    of this process would leave behind."""
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = _status(entry)
                count += (fields["Uid"].split()[0] == "65534" and not fields["State"].strip().startswith("Z")
                          and not _others_descendant(entry, fields))
            except (OSError, KeyError, ValueError):
                pass
    return count


@pytest.fixture
def listening_port():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(5.0)
    accepted = []

    def accept():
        try:
            accepted.append(server.accept())
        except OSError:
            pass
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    server.close()


@pytest.fixture
def secret_file(tmp_path):
    path = tmp_path / "root_only.txt"
    path.write_text("the secret")
    path.chmod(0o600)
    return path


FORK_EXEC = ("import _posixsubprocess, os\ndef transform(x):\n    r, w = os.pipe()\n"
             "    return _posixsubprocess.fork_exec([b'/bin/true'], [b'/bin/true'], True, (), None, None, -1, -1,"
             " -1, -1, -1, -1, r, w, True, False, -1, None, None, None, -1, None, False)\n")
# name: (code, limits, expected limit with the audit hook, expected limit without it or None: not run)
PAYLOADS = {
    "infinite_loop": ("def transform(x):\n    while True:\n        pass\n", LIMITS, "timeout", None),
    "cpu_limit": ("def transform(x):\n    while True:\n        pass\n", SandboxLimits(timeout_s=20.0, cpu_s=1),
                  "cpu", None),
    "memory_bomb": ("def transform(x):\n    hoard = []\n    while True:\n        hoard.append(bytearray(10 ** 7))\n",
                    LIMITS, "memory", "memory"),
    "fork_bomb": ("import os\ndef transform(x):\n    while True:\n        os.fork()\n", LIMITS, "audit_hook",
                  "permission"),
    "double_fork": ("import os, time\ndef transform(x):\n    if os.fork() == 0:\n        if os.fork() == 0:\n"
                    "            time.sleep(3)\n            open('/tmp/late', 'w').write('x')\n        os._exit(0)\n"
                    "    return x\n", LIMITS, "audit_hook", "permission"),
    "os_system": ("import os\ndef transform(x):\n    return os.system('touch /tmp/sandbox_escape_probe.txt')\n",
                  LIMITS, "audit_hook", None),
    "subprocess": ("import subprocess\ndef transform(x):\n    return subprocess.run(['id']).returncode\n", LIMITS,
                   "audit_hook", "permission"),
    "fork_exec": (FORK_EXEC, LIMITS, "permission", "permission"),
    "ctypes": ("import ctypes\ndef transform(x):\n    return ctypes.CDLL(None).fork()\n", LIMITS, "audit_hook", None),
    "write_outside": ("def transform(x):\n    open('/work/sandbox_escape_probe.txt', 'w').write('x')\n", LIMITS,
                      "audit_hook", "read_only"),
    "file_size": ("def transform(x):\n    open('big.bin', 'wb').write(b'0' * (20 * 1024 * 1024))\n",
                  SandboxLimits(timeout_s=3.0, max_file_mb=8, scratch_mb=64), "file_size", "file_size"),
    "output_100mb": ("def transform(x):\n    return 'y' * (100 * 1024 * 1024)\n",
                     SandboxLimits(timeout_s=5.0, memory_mb=1024), "output", "output"),
    "ignore_sigterm": ("import signal\ndef transform(x):\n    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                       "    while True:\n        pass\n", LIMITS, "timeout", None),
    "many_threads": ("import threading, time\ndef transform(x):\n    for _ in range(10000):\n"
                     "        threading.Thread(target=time.sleep, args=(10,), daemon=True).start()\n", LIMITS, "nproc",
                     "nproc"),
    "deep_recursion": ("def transform(x):\n    return transform(x)\n", LIMITS, "recursion", None),
    "kill_parent": ("import os, signal\ndef transform(x):\n    os.kill(os.getppid(), signal.SIGKILL)\n    return x\n",
                    LIMITS, "audit_hook", "permission"),
}


def _run_payload(code, limits, *, audit_hook=True, mode="strict"):
    before = nobody_processes()
    start = time.monotonic()
    report = run_transform_tests(code, [(1, 1)], limits=limits, mode=mode, audit_hook=audit_hook)
    elapsed = time.monotonic() - start
    # did not hang: the deadline stopped it (which limit fired is the caller's assertion); the margin is for a
    # loaded machine, the check is that the run ends, not how fast
    assert elapsed < limits.timeout_s + 10.0, (elapsed, report)
    # nothing left behind: the other xdist worker's sandboxes (uid nobody too) may start and end meanwhile, so a
    # count above `before` must fall back within a grace period; a leaked process never does
    deadline = time.monotonic() + 10.0
    while nobody_processes() > before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert nobody_processes() <= before
    assert not os.path.exists(PROBE) and not os.path.exists("/work/sandbox_escape_probe.txt")
    return report.tests[0]


@STRICT
@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_hostile_payload_stopped_by_the_one_limit(name):
    code, limits, with_hook, _ = PAYLOADS[name]
    outcome = _run_payload(code, limits)
    assert not outcome.passed and outcome.limit == with_hook, outcome


@STRICT
@pytest.mark.parametrize("name", sorted(n for n, p in PAYLOADS.items() if p[3]))
def test_walls_hold_without_the_audit_hook(name):
    code, limits, _, without_hook = PAYLOADS[name]
    outcome = _run_payload(code, limits, audit_hook=False)
    assert not outcome.passed and outcome.limit == without_hook, outcome


@STRICT
def test_ctypes_and_os_system_without_the_hook_cannot_create_processes():
    ctypes_fork = ("import ctypes\ndef transform(x):\n    libc = ctypes.CDLL(None, use_errno=True)\n"
                   "    return [libc.fork(), ctypes.get_errno()]\n")
    assert _run_payload(ctypes_fork, LIMITS, audit_hook=False).got == [-1, errno.EPERM]
    system = _run_payload(PAYLOADS["os_system"][0], LIMITS, audit_hook=False)
    assert system.error is None or system.got != 0  # the shell never ran: no exit status 0
    assert system.got != 0 and not os.path.exists(PROBE)


@STRICT
def test_loopback_listener_gets_no_connection(listening_port):
    port, accepted = listening_port
    code = (f"import socket\ndef transform(x):\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(b'leak')\n    return x\n")
    for hook in (True, False):
        outcome = _run_payload(code, LIMITS, audit_hook=hook)
        assert outcome.limit == "permission" and "Operation not permitted" in outcome.error, outcome
    assert accepted == []


@STRICT
def test_host_files_are_hidden(secret_file):
    code = (f"import os\ndef transform(x):\n    seen = [os.listdir(p) for p in ('/work', '/root', '/home', '/var')]\n"
            f"    try:\n        return [seen, open({str(secret_file)!r}).read()]\n"
            f"    except OSError as err:\n        return [seen, type(err).__name__]\n")
    outcome = _run_payload(code, LIMITS, audit_hook=False)
    assert outcome.got == [[[], [], [], []], "FileNotFoundError"], outcome
    if os.path.exists("/etc/shadow") and not os.stat("/etc/shadow").st_mode & 0o004:  # visible, root-only
        shadow = "def transform(x):\n    return open('/etc/shadow').read()\n"
        assert _run_payload(shadow, LIMITS, audit_hook=False).error.startswith("PermissionError")


@STRICT
def test_identity_scratch_and_proc_of_the_payload():
    code = ("import os\ndef transform(x):\n    open('note', 'w').write('kept in scratch')\n"
            "    return [os.getuid(), os.getgid(), os.getgroups(), os.getcwd(), open('note').read(),"
            " sorted(int(p) for p in os.listdir('/proc') if p.isdigit())]\n")
    outcome = _run_payload(code, LIMITS)
    assert outcome.got == [65534, 65534, [], "/tmp", "kept in scratch", [1, 2]], outcome
    assert _run_payload("import reasoner\ndef transform(x):\n    return x\n", LIMITS).error.startswith(
        "ModuleNotFoundError")


def test_per_test_pass_fail_with_errors():
    mode = "strict" if unshare_works() else "weak"
    report = run_transform_tests("def transform(lst):\n    return [2 * x for x in lst] if lst != [5] else 1/0\n",
                                 TESTS, limits=LIMITS, mode=mode)
    assert [t.passed for t in report.tests] == [True, True, False]
    assert "ZeroDivisionError" in report.tests[2].error and not report.passed_all
    wrong = run_transform_tests("def transform(lst):\n    return lst\n", TESTS[:1], limits=LIMITS, mode=mode)
    assert wrong.tests[0].error == "wrong output: expected [2, 4], got [1, 2]"
    syntax = run_transform_tests("def transform(lst) return lst", TESTS[:1], limits=LIMITS, mode=mode)
    assert "SyntaxError" in syntax.tests[0].error
    missing = run_transform_tests("def other(x):\n    return x\n", TESTS[:1], limits=LIMITS, mode=mode)
    assert "no function 'transform'" in missing.tests[0].error
    # equal under Python's ==, not the same JSON value: a bool or a float is not the int the test expects
    alike = run_transform_tests("def transform(x):\n    return x['v']\n",
                                [({"v": True}, 1), ({"v": 1.0}, 1), ({"v": [True, 2]}, [1, 2]),
                                 ({"v": {"b": 1, "a": [2]}}, {"a": [2], "b": 1})], limits=LIMITS, mode=mode)
    assert [t.passed for t in alike.tests] == [False, False, False, True]
    assert alike.tests[0].error == "wrong output: expected 1, got True"


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="code must be str"):
        run_transform_tests(b"def transform(x): return x", TESTS)
    with pytest.raises(ValueError, match="network must be"):
        run_transform_tests(DOUBLE, TESTS, network="open")
    with pytest.raises(ValueError, match="mode must be one of"):
        run_transform_tests(DOUBLE, TESTS, mode="none")
    with pytest.raises(ValueError, match="SandboxLimits.timeout_s must be a positive number"):
        SandboxLimits(timeout_s=-1)


def test_environment_is_clean_and_cwd_is_fresh(monkeypatch):
    monkeypatch.setenv("SECRET_TOKEN", "hunter2")
    code = "import os\ndef transform(x):\n    return [sorted(os.environ), os.listdir('.')]\n"
    for mode in ("strict", "weak") if unshare_works() else ("weak",):
        env_names, listing = run_transform_tests(code, [(0, None)], limits=LIMITS, mode=mode).tests[0].got
        assert "SECRET_TOKEN" not in env_names and set(env_names) <= {"PATH", "HOME", "LANG", "PYTHONHASHSEED"}
        assert listing == []


def test_strict_mode_refuses_without_namespaces(monkeypatch):
    monkeypatch.setattr(sandbox, "unshare_works", lambda: False)
    with pytest.raises(SandboxUnavailable, match="mode='weak'"):
        run_transform_tests(DOUBLE, TESTS)
    assert isolation_report() == {name: False for name in EXPECTED_LAYERS}


@pytest.mark.skipif(os.geteuid() != 0, reason="the uid drop needs root")
def test_weak_mode_is_never_root_and_keeps_its_layers(listening_port):
    port, accepted = listening_port
    weak = run_transform_tests("import os\ndef transform(x):\n    return os.getuid()\n", [(0, 65534)], mode="weak",
                               limits=LIMITS)
    assert weak.passed_all and dict(weak.layers) == {"netns+pidns+mountns": False, "uid": True, "rlimits": True,
                                                     "seccomp": True, "audit_hook": True}
    connect = (f"import socket\ndef transform(x):\n    socket.create_connection(('127.0.0.1', {port}))\n")
    assert _run_payload(connect, LIMITS, mode="weak", audit_hook=False).limit == "permission" and accepted == []
    assert _run_payload(PAYLOADS["fork_exec"][0], LIMITS, mode="weak").limit == "permission"
    # files created without an `open` event: a sqlite database (the hook checks its path) and a FIFO (seccomp)
    target = f"/tmp/sandbox_escape_{os.getpid()}"
    sqlite = f"import sqlite3\ndef transform(x):\n    sqlite3.connect('{target}.db').execute('create table t (a)')\n"
    fifo = f"import os\ndef transform(x):\n    os.mkfifo('{target}.fifo')\n"
    assert _run_payload(sqlite, LIMITS, mode="weak").limit == "audit_hook"
    assert _run_payload(fifo, LIMITS, mode="weak").limit == "permission"
    assert not os.path.exists(target + ".db") and not os.path.exists(target + ".fifo")
    memory_db = ("import sqlite3\ndef transform(x):\n"
                 "    return sqlite3.connect(':memory:').execute('select 1').fetchone()[0]\n")
    assert run_transform_tests(memory_db, [(0, 1)], mode="weak", limits=LIMITS).passed_all


@STRICT
def test_isolation_report_has_every_layer():
    assert isolation_report() == {name: True for name in EXPECTED_LAYERS}


@STRICT
def test_pool_keeps_serving_after_hostile_payloads():
    before = descendant_pids()
    with VerifierPool(workers=1, deadline_s=LIMITS.timeout_s + 2.0, memory_mb=512) as pool:
        for name in ("fork_exec", "infinite_loop", "memory_bomb", "kill_parent"):
            result = pool.submit("reasoner.verifiers.sandbox:run_transform_tests", PAYLOADS[name][0], [(1, 1)],
                                 task_kwargs={"limits": LIMITS}).result()
            assert result.ok and result.value.tests[0].limit == PAYLOADS[name][2], (name, result)
        follow = pool.submit("reasoner.verifiers.sandbox:run_transform_tests", DOUBLE, TESTS,
                             task_kwargs={"limits": LIMITS}).result()
        assert follow.ok and follow.value.passed_all
    assert descendant_pids() <= before


@pytest.mark.parametrize("answer, passes", [
    ("<think>shift by one</think>\n<answer>\ndef transform(s):\n    return ''.join(chr(ord(c) + 1) for c in s)\n</answer>",
     True),
    ("<answer>\n```python\ndef transform(s):\n    return ''.join(chr(ord(c) + 1) for c in s)\n```\n</answer>", True),
    ("def transform(s):\n    return ''.join(chr(ord(c) + 1) for c in s)", False),  # no <answer> span: CEDAR scores 0
])
def test_cedar_answer_extraction_and_verification(answer, passes):
    from reasoner.verifiers.sandbox import extract_answer_code, verify_transform_answer

    code = extract_answer_code(answer)
    assert code.startswith("def transform(s):") if passes else code == ""
    mode = "strict" if unshare_works() else "weak"
    report = verify_transform_answer(answer, [("abc", "bcd"), ("HAL", "IBM")], limits=LIMITS, mode=mode)
    assert report.passed_all == passes and report.pass_count == 2 * passes


def test_print_100mb_costs_nothing():
    mode = "strict" if unshare_works() else "weak"
    code = "def transform(x):\n    print('y' * (100 * 1024 * 1024))\n    return x\n"
    assert run_transform_tests(code, [(1, 1)], limits=SandboxLimits(timeout_s=5.0), mode=mode).passed_all


@STRICT
def test_lock_down_exposes_paths_read_only_even_under_tmp(tmp_path):
    """What the Z3 jail relies on: an exposed directory (here under /tmp, like a CI checkout) stays
    readable and read-only; its siblings are gone."""
    import subprocess
    import sys

    (tmp_path / "shown").mkdir()
    (tmp_path / "shown" / "f.txt").write_text("visible")
    (tmp_path / "hidden.txt").write_text("secret")
    script = ("import os, sys\nfrom reasoner.verifiers.sandbox_child import lock_down\n"
              f"layers = lock_down(mount_ns=True, expose=[{str(tmp_path / 'shown')!r}, sys.base_prefix, sys.prefix])\n"
              f"shown = open({str(tmp_path / 'shown' / 'f.txt')!r}).read()\n"
              f"try:\n    open({str(tmp_path / 'shown' / 'g.txt')!r}, 'w')\n    ro = 'writable'\n"
              "except OSError as err:\n    ro = err.strerror\n"
              f"print(shown, ro, os.path.exists({str(tmp_path / 'hidden.txt')!r}), os.getuid(), sorted(layers.items()))\n")
    out = subprocess.run([*sandbox.NAMESPACE_PREFIX, sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, cwd=os.path.dirname(os.path.dirname(os.path.dirname(sandbox.__file__))))
    assert out.stdout.strip() == ("visible Read-only file system False 65534 [('netns+pidns+mountns', True), "
                                  "('rlimits', False), ('seccomp', True), ('uid', True)]"), out
