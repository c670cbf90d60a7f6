"""The curves figure: which metrics get a panel, and the PNG it writes."""

import json

from reasoner.metrics.curves import metric_series, plot_curves

RECORDS = [
    {"step": 1, "kind": "train", "loss": 4.0, "lr": 0.1, "dropped": 0, "note": "x"},
    {"step": 2, "kind": "train", "loss": 3.0, "lr": 0.1, "dropped": 0},
    {"step": 2, "kind": "eval", "loss": 3.5, "val_tokens": 64},
]


def test_changing_metrics_get_panels_and_constant_ones_are_named():
    series, constant = metric_series(RECORDS)
    assert series == {"loss": {"train": ([1, 2], [4.0, 3.0]), "eval": ([2], [3.5])}, "val_tokens": {"eval": ([2], [64])}}
    assert constant == {"lr": 0.1, "dropped": 0}  # one value over several records: no panel
    assert metric_series(RECORDS, keys=["lr"]) == ({}, {"lr": 0.1})


def test_plot_writes_a_png(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    png = plot_curves(path, tmp_path / "curves.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_read_metrics_filters_kinds_and_names_a_bad_line(tmp_path):
    import pytest

    from reasoner.metrics.curves import read_metrics

    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in RECORDS) + "\n\n")
    assert read_metrics(path) == RECORDS and read_metrics(path, kind="eval") == RECORDS[2:]
    path.write_text(json.dumps(RECORDS[0]) + '\n{"step": 2, "kind": "tr\n')  # a write cut short
    with pytest.raises(ValueError, match=r"metrics.jsonl:2: not valid JSON"):
        read_metrics(path)
