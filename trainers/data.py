"""Where a trainer's examples come from: chat JSONL through the TFDS builder, or any TFDS data source.

`config.data.source`:
  "jsonl": `config.data.path` is a directory of train/validation/test .jsonl files (see
           `reasoner.data.chat_jsonl`), built once into `config.data.tfds_dir` (default: workdir/tfds).
  "tfds":  `config.data.name` is a registered TFDS builder read with `tfds.data_source` from
           `config.data.tfds_dir`; its records must carry the chat fields (prompt, completion | chosen, rejected).
"""

from __future__ import annotations

import pathlib


def load_splits(data_cfg, *, kind: str, workdir) -> dict:
    """{split: random-access source of chat dicts} for `kind` in {'sft', 'dpo'}."""
    tfds_dir = data_cfg.get("tfds_dir") or str(pathlib.Path(workdir) / "tfds")
    if data_cfg.source == "jsonl":
        from reasoner.data.chat_jsonl import build_chat_dataset

        if not data_cfg.get("path"):
            raise ValueError("data.source='jsonl' needs data.path: a directory holding train.jsonl")
        return build_chat_dataset(data_cfg.path, kind=kind, data_dir=tfds_dir)
    if data_cfg.source == "tfds":
        import tensorflow_datasets as tfds

        from reasoner.data.chat_jsonl import FIELDS, DecodedSource

        builder = tfds.builder(data_cfg.name, data_dir=tfds_dir, file_format="array_record")
        return {split: DecodedSource(builder.as_data_source(split=split), FIELDS[kind])
                for split in builder.info.splits.keys()}
    raise ValueError(f"data.source={data_cfg.source!r}; expected 'jsonl' or 'tfds'")
