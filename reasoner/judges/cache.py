"""The judges' on-disk cache: `CachedJudge` puts any `Judge` behind append-only JSONL files keyed by (judge id,
prompt), so the same trace is never judged twice (temperature 0: the reply would not change). Failures are not
cached, nor prompts a cancelled call did not send (`judge.UNSENT`).

One file per writer. In a job of several processes each appends to its own file (process k > 0:
`<stem>.p<k><suffix>` beside the path) and every file is read back at start: appends of several processes to one
file (a shared workdir, NFS) interleave and tear lines (a row longer than one write, or NFS, which has no atomic
append), while per-process files keep every process's replies for the next run. The index alone is not enough:
processes started by hand, or by a launcher that sets only JAX's variables, all read index 0 before a job is joined.
So a writer takes its file under an exclusive `flock`, and one that finds it held appends to
`<stem>.pid<pid>-<host>-<random><suffix>` instead, a file no other process writes. Reading never raises: a torn last
line (a process killed mid-write) or a file that cannot be read is skipped and counted.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import pathlib
import re
import secrets
import socket
import sys
import threading
from collections.abc import Sequence

try:
    import fcntl
except ImportError:  # not POSIX: no advisory locks, see `_claim`
    fcntl = None

from reasoner.judges.judge import Judge, JudgeCounters, Messages, reply_with_cancel


def cache_files(path: str | pathlib.Path) -> list[pathlib.Path]:
    """The files of the judge cache at `path`: `path` itself (process 0's), `<stem>.p<k><suffix>` of every other
    process that appended to it, in process order, then `<stem>.pid<pid>-<host>-<random><suffix>` of writers that
    found their file held by another (`CachedJudge`), by name."""
    path = pathlib.Path(path)
    pattern = re.compile(re.escape(path.stem) + r"\.(?:p(\d+)|pid\d+-[A-Za-z0-9-]+)" + re.escape(path.suffix))
    names = [f for f in path.parent.iterdir()] if path.parent.is_dir() else []  # not glob: a '[' in the name
    matched = [(m, f) for f in names if (m := pattern.fullmatch(f.name))]
    indexed = sorted(((int(m.group(1)), f) for m, f in matched if m.group(1) is not None), key=lambda p: p[0])
    unindexed = sorted((f for m, f in matched if m.group(1) is None), key=lambda f: f.name)
    return ([path] if path.exists() else []) + [f for _, f in indexed] + unindexed


def known_process_index() -> int | None:
    """This process's index in its job when the job says it: a joined `jax.distributed` job, the `REASONER_*`
    cluster variables, or 0 under `REASONER_DISTRIBUTED=off` (a launcher's word that it started one process); else
    None. `distributed.process_index()` answers 0 then too, which is every hand-started process's answer."""
    jax = sys.modules.get("jax")
    if jax is not None and jax.distributed.is_initialized():
        return jax.process_index()
    from reasoner import distributed

    try:
        if distributed.distributed_mode(os.environ) == "off":
            return 0
        spec = distributed.cluster_from_env()
    except ValueError:  # malformed REASONER_* variables: the launcher reports them; here the index is unknown
        return None
    return spec.process_id if spec is not None else None


def _unique_name(path: pathlib.Path) -> pathlib.Path:
    """A file beside `path` that no other live process writes: pid and host name, and a random part for pid
    namespaces (two containers with one host name and pid 1)."""
    host = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:63] or "host"
    return path.with_name(f"{path.stem}.pid{os.getpid()}-{host}-{secrets.token_hex(3)}{path.suffix}")


def read_cache(files: Sequence[pathlib.Path]) -> tuple[dict[str, str], int]:
    """({key: reply} of every readable row, rows skipped) over `files` in order. Lines split at newline bytes only
    (a reply holding U+2028 or U+0085, which JSON writes raw, is one line); a line that is not a UTF-8 JSON object
    with string "key" and "reply" (a process killed mid-write leaves such a tail) and a file that cannot be read
    are skipped and counted, never raised."""
    replies: dict[str, str] = {}
    skipped = 0
    for file in files:
        try:
            data = file.read_bytes()
        except OSError as err:
            print(f"[judge cache] cannot read {file} ({err}); its replies are asked again", file=sys.stderr)
            skipped += 1
            continue
        for raw in data.split(b"\n"):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw.decode("utf-8"))
                key, reply = row["key"], row["reply"]
            except (ValueError, KeyError, TypeError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
                skipped += 1
                continue
            if isinstance(key, str) and isinstance(reply, str):
                replies[key] = reply
            else:
                skipped += 1
    return replies, skipped


class CachedJudge:
    """`judge` behind an append-only JSONL cache at `path`: one `{"key", "reply"}` line per answered prompt, the
    key the sha256 of (judge id, prompt). Thread-safe.

    Which file this object appends to: process 0 of a job, or a process whose index is not known, prefers `path`;
    process k > 0 prefers `<stem>.p<k><suffix>`. It takes the preferred file when it can hold an exclusive `flock`
    on it for as long as it writes (until `close()` or exit); when another writer holds it (two processes started by
    hand both think they are 0), or when an unknown index meets a filesystem without locks, it appends to a file of
    its own (`_unique_name`: pid, host, random), so two live writers never share a file; a process that knows its
    index and cannot lock keeps the preferred file, as its index makes it the only writer. Every file of the cache
    (`cache_files`) is read at start; `skipped_lines` counts the rows that could not be read (a line on stderr says
    so), and a torn last line of the file taken is ended first, so the next row does not join it. A write that fails
    (disk full) is said once on stderr (`write_errors` counts them) and the replies still come back.

    process: the index of this process in the job (default `known_process_index()`); counters: hits and misses are
    counted here, and in the counters a call passes (`ask_judge`)."""

    def __init__(self, judge: Judge, path: str | pathlib.Path, counters: JudgeCounters | None = None, *,
                 process: int | None = None):
        self.judge, self.path = judge, pathlib.Path(path)
        self.judge_id = judge.judge_id
        self.counters = counters
        process = known_process_index() if process is None else int(process)
        if process is not None and process < 0:
            raise ValueError(f"process={process}: expected a process index >= 0")
        self._lock = threading.Lock()
        files = cache_files(self.path)
        self._replies, self.skipped_lines = read_cache(files)
        if self.skipped_lines:
            print(f"[judge cache] skipped {self.skipped_lines} unreadable rows of {len(files)} files at {self.path} "
                  "(a torn last line of a killed process, or not a cache row)", file=sys.stderr)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        preferred = self.path if not process else self.path.with_name(f"{self.path.stem}.p{process}{self.path.suffix}")
        self._fd, claim = _claim(preferred)
        keep = claim == "claimed" or (claim == "unlockable" and process is not None)
        self.write_path = preferred if keep else _unique_name(self.path)
        self._torn_tail = keep and _ends_unterminated(preferred)
        self.write_errors, self._closed = 0, False

    def key(self, prompt: Messages) -> str:
        blob = json.dumps([self.judge_id, prompt], sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()

    def reply(self, prompts: Sequence[Messages], *, counters: JudgeCounters | None = None,
              cancel: threading.Event | None = None) -> list:
        """The replies, cached ones first; hits and misses counted in `self.counters` and `counters` (once when they
        are the same object). `cancel` goes to the judge (`reply_with_cancel`): prompts it did not send are UNSENT."""
        keys = [self.key(p) for p in prompts]
        with self._lock:
            out: list = [self._replies.get(k) for k in keys]
            missing = [i for i, r in enumerate(out) if r is None]
            for c in {id(c): c for c in (self.counters, counters) if c is not None}.values():
                c.cache_hits += len(prompts) - len(missing)
                c.cache_misses += len(missing)
        # Identical prompts in one batch (G samples that wrote the same trace) are asked once.
        unique = list(dict.fromkeys(keys[i] for i in missing))
        first = {k: next(i for i in missing if keys[i] == k) for k in unique}
        fresh = reply_with_cancel(self.judge, [prompts[first[k]] for k in unique], cancel) if unique else []
        if len(fresh) != len(unique):  # zip would drop the rest, and a KeyError name a hash
            raise ValueError(f"judge {self.judge_id!r} returned {len(fresh)} replies for {len(unique)} prompts")
        got = dict(zip(unique, fresh))
        with self._lock:
            self._append({k: text for k, text in got.items() if isinstance(text, str) and k not in self._replies})
        for i in missing:
            out[i] = got[keys[i]]
        return out

    def close(self) -> None:
        """Releases the cache file (and its claim); later replies are kept in memory only."""
        with self._lock:
            self._closed = True
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def _append(self, new: dict[str, str]) -> None:
        """Keeps `new` in memory and appends it to `write_path` (under the lock), opening that file on first use."""
        self._replies.update(new)
        if not new or self._closed:
            return
        rows = "".join(json.dumps({"key": k, "reply": text}, ensure_ascii=False) + "\n" for k, text in new.items())
        data = (("\n" if self._torn_tail else "") + rows).encode("utf-8")
        try:
            if self._fd is None:
                self._fd = os.open(self.write_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            while data:  # one write per batch; a short write (a signal, a full disk) goes on where it stopped
                data = data[os.write(self._fd, data):]
            self._torn_tail = False
        except OSError as err:  # the replies are good; only the next run loses them
            self._torn_tail = True  # part of a row may have been written: the next row starts a line of its own
            self.write_errors += 1
            if self.write_errors == 1:
                print(f"[judge cache] cannot append to {self.write_path} ({err}); replies are kept in memory only",
                      file=sys.stderr)


def _claim(path: pathlib.Path) -> tuple[int | None, str]:
    """`path` opened for appending under an exclusive `flock` held until the descriptor closes: (fd, "claimed");
    (None, "held") when another writer holds it; (None, "unlockable") when this filesystem has no such locks;
    (None, "unopenable") when it cannot be opened (a directory, no permission)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError:
        return None, "unopenable"
    if fcntl is None:
        os.close(fd)
        return None, "unlockable"
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd, "claimed"
    except OSError as err:
        os.close(fd)
        return None, "held" if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES) else "unlockable"


def _ends_unterminated(file: pathlib.Path) -> bool:
    """Whether `file` ends without a newline (a process killed mid-write): the next append must start a line."""
    try:
        with file.open("rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() == 0:
                return False
            f.seek(-1, os.SEEK_END)
            return f.read(1) != b"\n"
    except OSError:
        return False
