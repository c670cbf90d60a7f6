"""The one JSONL reader: one JSON object per line, blank lines skipped, errors naming the file and line.

    for lineno, record in iter_jsonl(path, what="one A* record per line"): ...
    rows = read_jsonl(path)                       # list of dicts
    write_jsonl(path, rows)                       # atomic: readers never see half a file

Bad input is a `ValueError` of one line, `"<path>:<line>: not valid JSON (<reason>); expected <what>"` (or "...:
expected a JSON object ..."); a missing file is a `FileNotFoundError` naming it.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any, Iterable, Iterator, Mapping


def parse_object(line: str, *, where: str, what: str = "one JSON object per line") -> dict[str, Any]:
    """One line -> its JSON object; a ValueError naming `where` (e.g. "train.jsonl:3") otherwise."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise ValueError(f"{where}: not valid JSON ({err.msg}); expected {what}") from None
    if not isinstance(record, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(record).__name__}; expected {what}")
    return record


def iter_lines(path, *, what: str = "one JSON object per line") -> Iterator[tuple[int, str]]:
    """(1-based line number, text) of every non-blank line of `path`, decoded as UTF-8 line by line (a leading
    byte order mark skipped): a byte that is not UTF-8 is a ValueError naming the file and line (a bare
    UnicodeDecodeError named neither)."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file; expected JSONL ({what})")
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                # a UTF-8 byte order mark (editors on Windows write one) starts the file, not the first record:
                # `datasets` (pyarrow) skips it, so the same file reads alike through data.hf_path
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as err:
                raise ValueError(f"{path}:{lineno}: not valid UTF-8 ({err.reason} at byte {err.start}); expected "
                                 f"{what} in UTF-8") from None
            if line.strip():
                yield lineno, line


def iter_jsonl(path, *, what: str = "one JSON object per line") -> Iterator[tuple[int, dict[str, Any]]]:
    """(1-based line number, record) of every non-blank line of `path`."""
    for lineno, line in iter_lines(path, what=what):
        yield lineno, parse_object(line, where=f"{path}:{lineno}", what=what)


def read_jsonl(path, *, what: str = "one JSON object per line") -> list[dict[str, Any]]:
    """Every record of `path`, in order."""
    return [record for _, record in iter_jsonl(path, what=what)]


def write_jsonl(path, rows: Iterable[Mapping[str, Any]], *, default=None) -> pathlib.Path:
    """One JSON object a line, written to a temporary file of this process and renamed into place: a reader (the
    TFDS builder, the next stage) never sees half a file, and processes of one job that write the same file on a
    shared disk never interleave (the last rename wins, and their contents are the same). Returns the path."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp.{os.getpid()}")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False, default=default) + "\n")
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)  # after a failure: the old file stays whole and no temporary is left
    return path
