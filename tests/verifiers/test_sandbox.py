"""Code sandbox for model-written `transform(x)`: per-test verdicts, both isolation modes, and the
hostile payloads (fork repeatedly, open a socket, write outside, sleep, print 100 MB) through the pool."""

import os
import socket
import threading
import time

import pytest

from reasoner.verifiers.pool import VerifierPool, descendant_pids
from reasoner.verifiers.sandbox import SandboxLimits, run_transform_tests, unshare_works, choose_interpreter

DOUBLE = "def transform(lst):\n    return [2 * x for x in lst]\n"
TESTS = [([1, 2], [2, 4]), ([], []), ([5], [10])]
LIMITS = SandboxLimits(timeout_s=2.0)


def orphaned_nobody_processes() -> int:
    """Processes of uid 65534 whose `unshare` parent is gone (re-parented to an init or subreaper):
    what a sandbox would leave behind. Live sandboxes of concurrent tests still have their parent."""
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid != 65534:
                    continue
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                with open(f"/proc/{ppid}/comm") as f:
                    count += f.read().strip() != "unshare"
            except (OSError, ValueError, IndexError):
                pass
    return count


@pytest.fixture(params=["auto", "block"])
def network(request):
    return request.param


def test_per_test_pass_fail_with_errors(network):
    report = run_transform_tests("def transform(lst):\n    return [2 * x for x in lst] if lst != [5] else 1/0\n",
                                 TESTS, limits=LIMITS, network=network)
    assert [t.passed for t in report.tests] == [True, True, False]
    assert "ZeroDivisionError" in report.tests[2].error and not report.passed_all
    wrong = run_transform_tests("def transform(lst):\n    return lst\n", TESTS[:1], limits=LIMITS, network=network)
    assert wrong.tests[0].error == "wrong output: expected [2, 4], got [1, 2]"
    assert run_transform_tests(DOUBLE, TESTS, limits=LIMITS, network=network).pass_count == 3


def test_code_errors_are_reported(network):
    syntax = run_transform_tests("def transform(lst) return lst", TESTS[:1], limits=LIMITS, network=network)
    assert "SyntaxError" in syntax.tests[0].error
    missing = run_transform_tests("def other(x):\n    return x\n", TESTS[:1], limits=LIMITS, network=network)
    assert "no function 'transform'" in missing.tests[0].error
    with pytest.raises(TypeError, match="code must be str"):
        run_transform_tests(b"def transform(x): return x", TESTS)
    with pytest.raises(ValueError, match="network must be"):
        run_transform_tests(DOUBLE, TESTS, network="open")


def test_environment_is_clean_and_cwd_is_fresh(network, monkeypatch):
    monkeypatch.setenv("SECRET_TOKEN", "hunter2")
    code = "import os\ndef transform(x):\n    return [sorted(os.environ), os.listdir('.')]\n"
    report = run_transform_tests(code, [(0, None)], limits=LIMITS, network=network)
    env_names, listing = report.tests[0].got
    assert "SECRET_TOKEN" not in env_names and set(env_names) <= {"PATH", "HOME", "LANG", "PYTHONHASHSEED"}
    assert listing == []


def test_isolation_mode_matches_the_host():
    report = run_transform_tests(DOUBLE, TESTS[:1], limits=LIMITS)
    python, drop = choose_interpreter()
    if unshare_works(drop):
        assert report.isolation.startswith("netns+pidns")
    else:
        assert report.isolation == "audit-hook"
    assert run_transform_tests(DOUBLE, TESTS[:1], limits=LIMITS, network="block").isolation == "audit-hook"


@pytest.fixture
def listening_port():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    accepted = []
    thread = threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    server.close()


HOSTILE = {
    "fork_repeatedly": "import os\ndef transform(x):\n    while True:\n        os.fork()\n",
    "write_outside": "def transform(x):\n    open('/tmp/sandbox_escape_probe.txt', 'w').write('x')\n    return x\n",
    "sleep": "import time\ndef transform(x):\n    time.sleep(60)\n",
    "print_100mb": "def transform(x):\n    print('y' * (100 * 1024 * 1024))\n    return x\n",
    "allocate": "def transform(x):\n    hoard = []\n    while True:\n        hoard.append(bytearray(10 ** 7))\n",
}


@pytest.mark.parametrize("name", sorted(HOSTILE) + ["socket"])
def test_hostile_payloads_through_the_pool(name, network, listening_port):
    port, accepted = listening_port
    code = HOSTILE.get(name) or (f"import socket\ndef transform(x):\n"
                                 f"    socket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(b'leak')\n"
                                 f"    return x\n")
    before, orphans_before = descendant_pids(), orphaned_nobody_processes()
    with VerifierPool(workers=1, deadline_s=LIMITS.timeout_s + 2.0, memory_mb=512) as pool:
        start = time.monotonic()
        result = pool.submit("reasoner.verifiers.sandbox:run_transform_tests", code, [(1, 1)],
                             task_kwargs={"limits": LIMITS, "network": network}).result()
        elapsed = time.monotonic() - start
        assert result.ok, result
        report = result.value
        assert elapsed < LIMITS.timeout_s + 1.0, (elapsed, report)
        error = report.tests[0].error
        if name == "print_100mb":  # output goes nowhere; on a starved host the deadline may come first
            assert report.passed_all or error.startswith("timeout"), error
        else:
            assert not report.passed_all and error
        if name == "allocate":
            assert "MemoryError" in error or error.startswith("timeout"), error
        follow = pool.submit("reasoner.verifiers.sandbox:run_transform_tests", DOUBLE, TESTS,
                             task_kwargs={"limits": LIMITS, "network": network}).result()
        assert follow.ok and follow.value.passed_all
    time.sleep(0.2)
    assert len(descendant_pids()) <= len(before) and orphaned_nobody_processes() <= orphans_before
    assert not os.path.exists("/tmp/sandbox_escape_probe.txt")
    assert accepted == []
    if name == "sleep":
        assert "timeout" in report.tests[0].error
    if name == "socket":
        assert "Network is unreachable" in report.tests[0].error or "network access" in report.tests[0].error


@pytest.mark.parametrize("answer", [
    "<think>shift by one</think>\n<answer>\ndef transform(s):\n    return ''.join(chr(ord(c) + 1) for c in s)\n</answer>",
    "<answer>\n```python\ndef transform(s):\n    return ''.join(chr(ord(c) + 1) for c in s)\n```\n</answer>",
    "def transform(s):\n    return ''.join(chr(ord(c) + 1) for c in s)",
])
def test_cedar_answer_extraction_and_verification(answer):
    from reasoner.verifiers.sandbox import extract_answer_code, verify_transform_answer

    assert extract_answer_code(answer).startswith("def transform(s):")
    report = verify_transform_answer(answer, [("abc", "bcd"), ("HAL", "IBM")], limits=LIMITS)
    assert report.passed_all and report.pass_count == 2


def test_file_size_and_cpu_limits(network):
    big_file = "def transform(x):\n    open('big.bin', 'wb').write(b'0' * (20 * 1024 * 1024))\n    return x\n"
    report = run_transform_tests(big_file, [(1, 1)], limits=SandboxLimits(timeout_s=3.0, max_file_mb=8),
                                 network=network)
    assert "File too large" in report.tests[0].error
    small_file = big_file.replace("20 * 1024 * 1024", "1024")
    assert run_transform_tests(small_file, [(1, 1)], limits=LIMITS, network=network).passed_all
    start = time.monotonic()
    spin = run_transform_tests("def transform(x):\n    while True:\n        pass\n", [(1, 1)], limits=LIMITS,
                               network=network)
    assert spin.tests[0].error.startswith("timeout") or "exit status" in spin.tests[0].error
    assert time.monotonic() - start < LIMITS.timeout_s + 1.0
