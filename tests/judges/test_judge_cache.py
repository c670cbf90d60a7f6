"""The judge cache's hits and misses (counted where the other judge counters are), and a multi-process job's
appends (one file per process, all read back): before, `make_judge` built the cache without counters, a judged
reward's counters never saw a hit, and every process of a job appended to the same file."""

import json

from reasoner.judges import CachedJudge, JudgeCounters, judge_messages, score_traces

VERDICT = "Thinking.\n" + json.dumps({"directionality_score": 1.0, "explanation": "forward"})


class Canned:
    """A judge that answers every prompt with VERDICT and records what it was asked."""

    judge_id = "canned"

    def __init__(self):
        self.asked = []

    def reply(self, prompts):
        self.asked += list(prompts)
        return [VERDICT] * len(prompts)


def _prompt(trace):
    return judge_messages("directionality", source="balanced_copa", observation="Premise: x", reasoning=trace)


def test_hits_and_misses_reach_the_counters_score_traces_counts_into(tmp_path):
    own, per_metric = JudgeCounters(), JudgeCounters()
    cached = CachedJudge(Canned(), tmp_path / "c.jsonl", own)
    score_traces(cached, "directionality", [_prompt("a"), _prompt("b"), _prompt("a")], per_metric)
    score_traces(cached, "directionality", [_prompt("a"), _prompt("c")], per_metric)
    assert (per_metric.cache_hits, per_metric.cache_misses, per_metric.requests) == (1, 4, 5)
    assert (own.cache_hits, own.cache_misses) == (1, 4) and len(cached.judge.asked) == 3
    # the same counters held by the cache and passed by the caller (rewards.judged.build_judge) count once
    shared = JudgeCounters()
    again = CachedJudge(Canned(), tmp_path / "c.jsonl", shared)
    score_traces(again, "directionality", [_prompt("a"), _prompt("d")], shared)
    assert (shared.cache_hits, shared.cache_misses) == (1, 1)


def test_each_process_appends_to_its_own_file_and_all_are_read_back(tmp_path, monkeypatch):
    from reasoner.judges import cache
    from reasoner.judges.cache import cache_files

    path = tmp_path / "judge_cache[run1].jsonl"  # a glob metacharacter in the name is a name
    monkeypatch.setattr(cache, "known_process_index", lambda: 1)
    p1 = CachedJudge(Canned(), path)
    p0 = CachedJudge(Canned(), path, process=0)
    p1.reply([_prompt("one")])
    p0.reply([_prompt("zero")])
    p12 = CachedJudge(Canned(), path, process=12)
    p12.reply([_prompt("twelve")])
    (tmp_path / "judge_cache[run1].pX.jsonl").write_text("not a cache file\n")
    assert cache_files(path) == [path, *(tmp_path / f"judge_cache[run1].p{k}.jsonl" for k in (1, 12))]
    assert cache_files(tmp_path / "absent" / "c.jsonl") == []
    assert [len(f.read_text().splitlines()) for f in cache_files(path)] == [1, 1, 1]
    counters = JudgeCounters()
    later = CachedJudge(Canned(), path, counters, process=0)  # the next run, process 0: every process's replies
    assert later.reply([_prompt("one"), _prompt("zero"), _prompt("twelve")]) == [VERDICT] * 3
    assert later.judge.asked == [] and counters.cache_hits == 3


def test_a_judge_that_drops_replies_is_named_not_a_key_error(tmp_path):
    import pytest

    class Short(Canned):
        def reply(self, prompts):
            return super().reply(prompts)[:-1]

    cached = CachedJudge(Short(), tmp_path / "c.jsonl")
    with pytest.raises(ValueError, match="judge 'canned' returned 1 replies for 2 prompts"):
        cached.reply([_prompt("a"), _prompt("b")])


class Echo(Canned):
    """Answers "reply to <the user message>"; the writer processes below run the same class."""

    judge_id = "echo"

    def reply(self, prompts):
        self.asked += list(prompts)
        return ["reply to " + p[0]["content"] for p in prompts]


_WRITER = """
import pathlib, sys, time
from reasoner.judges import CachedJudge
from tests.judges.test_judge_cache import Echo

cache = CachedJudge(Echo(), sys.argv[1])
ready = pathlib.Path(sys.argv[1]).parent
(ready / ("ready-" + sys.argv[2])).touch()
deadline = time.monotonic() + 60
while len(list(ready.glob("ready-*"))) < 2 and time.monotonic() < deadline:  # both caches open: true overlap
    time.sleep(0.01)
for i in range(int(sys.argv[3])):
    cache.reply([[{"role": "user", "content": sys.argv[2] + str(i)}]])
print(cache.write_path)
"""


def test_two_processes_that_do_not_know_their_index_write_two_files_and_a_reader_sees_both(tmp_path):
    """Two `reasoner`-like processes started by hand (no REASONER_* variables; JAX's own variables, which nothing
    reads before `jax.distributed.initialize`, as a launcher of JAX's might set) append to one cache at the same
    time. Before, both took `distributed.process_index()` = 0 and appended to the same file; now the first takes
    `path` under its lock and the other a file named by its pid and host."""
    import os
    import re
    import subprocess
    import sys

    from reasoner.judges.cache import cache_files

    path = tmp_path / "cache" / "judge_cache.jsonl"
    path.parent.mkdir()
    base = {k: v for k, v in os.environ.items() if not k.startswith("REASONER_")}
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(path), name, "300"], cwd=os.getcwd(), text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=base | {"JAX_COORDINATOR_ADDRESS": "127.0.0.1:1", "JAX_NUM_PROCESSES": "2",
                                          "JAX_PROCESS_ID": str(k)})
             for k, name in enumerate(("first-", "second-"))]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
    files = cache_files(path)
    assert sorted(str(f) for f in files) == sorted(out.strip() for out, _ in outs)
    assert [f.name for f in files][0] == "judge_cache.jsonl" and len(files) == 2
    other = re.fullmatch(r"judge_cache\.pid(\d+)-[A-Za-z0-9-]+-[0-9a-f]{6}\.jsonl", files[1].name)
    assert other and int(other.group(1)) in {p.pid for p in procs}
    assert [len(f.read_text().splitlines()) for f in files] == [300, 300]
    reader = CachedJudge(Echo(), path, counters := JudgeCounters(), process=0)
    prompts = [[{"role": "user", "content": f"{name}{i}"}] for name in ("first-", "second-") for i in range(300)]
    assert reader.reply(prompts) == [f"reply to {p[0]['content']}" for p in prompts]
    assert reader.judge.asked == [] and (counters.cache_hits, reader.skipped_lines) == (600, 0)


def test_a_torn_last_line_is_skipped_counted_and_the_next_row_starts_a_new_line(tmp_path, capsys):
    """A process killed mid-write leaves its last row cut, here inside a two-byte UTF-8 character (replies are
    written unescaped): before, reading the cache raised UnicodeDecodeError at start, and a row appended after an
    ASCII cut joined the torn line and was lost."""
    path = tmp_path / "c.jsonl"
    writer = CachedJudge(Canned(), path, process=0)
    writer.judge.reply = lambda prompts: ["déjà vu " * 20 for _ in prompts]
    writer.reply([_prompt("a"), _prompt("b"), _prompt("c")])
    writer.close()
    data = path.read_bytes()
    cut = data.rindex("é".encode()) + 1  # inside the last row's last 'é'
    path.write_bytes(data[:cut])
    counters = JudgeCounters()
    resumed = CachedJudge(Canned(), path, counters, process=0)
    assert resumed.skipped_lines == 1 and "skipped 1 unreadable rows of 1 files" in capsys.readouterr().err
    assert resumed.reply([_prompt("a"), _prompt("b"), _prompt("c")]) == ["déjà vu " * 20] * 2 + [VERDICT]
    assert counters.cache_hits == 2 and len(resumed.judge.asked) == 1  # "c" was torn: asked again
    resumed.close()
    assert resumed.write_path == path  # it appended to the torn file, on a line of its own
    again = CachedJudge(Canned(), path, process=0)
    assert again.skipped_lines == 1 and again.reply([_prompt("c")]) == [VERDICT] and again.judge.asked == []


def test_replies_holding_unicode_line_separators_survive_a_restart(tmp_path):
    """JSON writes U+2028 and U+0085 raw; before, `str.splitlines` cut such a row in two and it was lost."""
    odd = "line one\u2028line two\x85three"
    first = CachedJudge(Canned(), tmp_path / "c.jsonl", process=0)
    first.judge.reply = lambda prompts: [odd for _ in prompts]
    first.reply([_prompt("a")])
    again = CachedJudge(Canned(), tmp_path / "c.jsonl", process=0)
    assert again.reply([_prompt("a")]) == [odd] and again.judge.asked == [] and again.skipped_lines == 0


_FULL_DISK = """
import json, resource, signal, sys
from reasoner.judges import CachedJudge
from tests.judges.test_judge_cache import Echo

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past RLIMIT_FSIZE a write fails with EFBIG instead
cache = CachedJudge(Echo(), sys.argv[1], process=0)
resource.setrlimit(resource.RLIMIT_FSIZE, (200, 200))
prompts = [[{"role": "user", "content": "x" * 150 + str(i)}] for i in range(3)]
first = [cache.reply([p])[0] for p in prompts]
print(json.dumps({"errors": cache.write_errors, "asked": len(cache.judge.asked), "same": cache.reply(prompts) == first}))
"""


def test_a_cache_that_cannot_be_written_or_read_costs_its_rows_not_the_run(tmp_path):
    """A real process whose file size limit (200 bytes, as a full disk would) stops its appends: the first row is
    cut at 200 bytes, every append fails, said once on stderr; the replies still come back and are kept in memory.
    The next run skips the torn row (counted), and a cache "file" it cannot read (a directory) is skipped too."""
    import json
    import os
    import re
    import subprocess
    import sys

    path = tmp_path / "c.jsonl"
    done = subprocess.run([sys.executable, "-c", _FULL_DISK, str(path)], cwd=os.getcwd(), text=True,
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"errors": 3, "asked": 3, "same": True}
    assert done.stderr.count("cannot append") == 1 and path.stat().st_size == 200
    (tmp_path / "c.p3.jsonl").mkdir()  # process 3's file is a directory: not read, not written
    later = CachedJudge(Canned(), path, process=3)
    assert later.skipped_lines == 2 and re.fullmatch(r"c\.pid\d+-[A-Za-z0-9-]+-[0-9a-f]{6}\.jsonl",
                                                     later.write_path.name)
    assert later.reply([_prompt("a")]) == [VERDICT] and later.write_errors == 0
    assert len(later.write_path.read_text().splitlines()) == 1
