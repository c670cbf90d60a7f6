"""The one JSONL reader and writer: errors name the file and line; writes are atomic and per-process."""

import json

import numpy as np
import pytest

from reasoner.data.jsonl import iter_jsonl, read_jsonl, write_jsonl


def test_round_trip_and_no_temporary_left(tmp_path):
    rows = [{"id": 1, "text": "é"}, {"id": 2, "value": np.float32(0.5)}]
    path = write_jsonl(tmp_path / "a" / "rows.jsonl", rows, default=float)
    assert read_jsonl(path) == [{"id": 1, "text": "é"}, {"id": 2, "value": 0.5}]
    assert [p.name for p in path.parent.iterdir()] == ["rows.jsonl"]


def test_bad_lines_are_named(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"a": 1}\n\n[1, 2]\n')
    with pytest.raises(ValueError, match=r"in.jsonl:3: expected a JSON object, got list"):
        list(iter_jsonl(path))
    path.write_text('{"a": 1}\n{oops\n')
    with pytest.raises(ValueError, match=r"in.jsonl:2: not valid JSON"):
        read_jsonl(path)
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        read_jsonl(tmp_path / "missing.jsonl")
    path.write_bytes('{"a": "é"}\n'.encode() + b'{"prompt": "h\xe9llo"}\n')  # Latin-1 on line 2
    with pytest.raises(ValueError, match=r"in.jsonl:2: not valid UTF-8 \(invalid continuation byte at byte 13\)"):
        read_jsonl(path)


def test_a_failed_write_leaves_the_old_file_whole(tmp_path):
    path = write_jsonl(tmp_path / "rows.jsonl", [{"a": 1}])

    def rows():
        yield {"a": 2}
        raise RuntimeError("the producer died")

    with pytest.raises(RuntimeError):
        write_jsonl(path, rows())
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["rows.jsonl"]


def test_only_process_0_writes_reports(tmp_path, monkeypatch):
    from reasoner import distributed
    from reasoner.evaluation import write_report

    monkeypatch.setattr(distributed, "process_index", lambda: 1)
    paths = write_report([object()], tmp_path / "report", name="astar")
    assert paths["json"].endswith("astar.json") and not (tmp_path / "report").exists()


def test_a_byte_order_mark_is_read_as_datasets_reads_it(tmp_path):
    # a JSONL file saved with a UTF-8 BOM: `datasets` reads its records, our reader refused line 1 ("not valid JSON
    # (Unexpected UTF-8 BOM ...)"), so the same file trained through data.hf_path but not through data.jsonl_dir
    import datasets

    path = tmp_path / "train.jsonl"
    rows = [{"prompt": "Say yes.", "completion": "Yes."}, {"prompt": "Say no.", "completion": "\ufeffNo."}]
    path.write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(r) + "\n" for r in rows).encode())
    reference = datasets.load_dataset("json", data_files=str(path), cache_dir=str(tmp_path / "cache"))["train"]
    assert read_jsonl(path) == reference.to_list() == rows  # a BOM inside a value is data, kept
    from reasoner.data.chat_jsonl import build_chat_dataset

    built = build_chat_dataset(tmp_path, kind="sft", data_dir=tmp_path / "tfds")["train"]
    assert [built[i]["completion"] for i in range(len(built))] == ["Yes.", "\ufeffNo."]
    path.write_bytes(b"\xef\xbb\xbf\n")  # a BOM alone is an empty file, named as one
    with pytest.raises(ValueError, match=r"train\.jsonl is empty: expected one sft record per line"):
        build_chat_dataset(tmp_path, kind="sft", data_dir=tmp_path / "tfds")
