"""Hugging Face `datasets` input in TRL's dataset formats, mapped onto our chat examples.

`data.hf_path` is one of
  a data file          .json / .jsonl / .parquet, read with `datasets.load_dataset(<format>, data_files=...)`;
                       its one split is "train"
  a directory of files <split>.json / .jsonl / .parquet (train, validation, test), the same way
  a saved dataset      a `Dataset.save_to_disk` / `DatasetDict.save_to_disk` directory (`datasets.load_from_disk`);
                       a lone `Dataset` is the split "train"

and its columns select the format (TRL's names; extra columns such as `id` are ignored, `tools` and
`chat_template_kwargs` are passed to the chat template as TRL's trainers pass them; a variable Arrow filled with
None, because another row sets it, is dropped as message keys are, so a row gives the variables it was written with,
as the same JSONL line does: a deliberate difference from TRL, which passes it as None, so that a template testing
`enable_thinking is defined` reads a row that never set it as set):

  sft     ["messages"]                       conversational: the prompt is everything before the first assistant
                                             turn, the completion the rest, which must end with an assistant turn
          ["conversations"]                  the same as {"from", "value"} messages (TRL's ShareGPT-style form)
          ["prompt", "completion"]           message lists (conversational) or strings (plain)
          ["text"]                           plain language modelling: every token trained
  dpo     ["prompt", "chosen", "rejected"]   message lists or strings
          ["chosen", "rejected"]             conversational with an implicit prompt (the messages both share)
  prompt  ["prompt"]                         GRPO prompts of task "chat" (message lists or strings), rows kept whole
  kto     ["prompt", "completion", "label"]  unpaired preference (KTO): label a boolean, true = desirable
          ["prompt", "chosen", "rejected"]   paired preference, unpaired as TRL's KTOTrainer does
          ["chosen", "rejected"]             (`reasoner.data.unpaired`)

Rows go through the same `reasoner.data.chat_jsonl.normalize_record` as our JSONL lines, so a dataset and a JSONL
file holding the same conversations give identical examples, and then identical packed rows and loss masks
(`reasoner.data.pipeline.prepare_sft` / `prepare_dpo`). One deliberate difference from TRL: a plain-string prompt
is one user message rendered through the chat template (as our JSONL reads it), not raw text. Bad rows (missing
columns, wrong types, empty conversations, an SFT conversation that does not end with the assistant) are a
`ValueError` naming the file, split, row index and what was expected: our JSONL convention (nothing is skipped).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any

FORMATS: dict[str, tuple[tuple[str, ...], ...]] = {
    "sft": (("messages",), ("conversations",), ("prompt", "completion"), ("text",)),
    "dpo": (("prompt", "chosen", "rejected"), ("chosen", "rejected")),
    "prompt": (("prompt",),),
    "kto": (("prompt", "completion", "label"), ("prompt", "chosen", "rejected"), ("chosen", "rejected")),
}
FILE_FORMATS = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}
SPLITS = ("train", "validation", "test")


@dataclasses.dataclass(frozen=True)
class ChatRows:
    """Random-access examples of one split, like `chat_jsonl.DecodedSource`; `name` ("<path> [<split>]") lets
    `prepare_sft` name the row of an error, and `lines` (the rows' line numbers in the JSONL file `name`, when read
    from one) its line."""

    name: str
    rows: list[dict[str, Any]]
    lines: tuple[int, ...] | None = None

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.rows[index]

    def where(self, index: int) -> str | None:
        """"<file>:<line>" of row `index` when the lines are known, else None (the caller names the row)."""
        return f"{self.name}:{self.lines[index]}" if self.lines is not None else None


def _is_saved_dataset(path: pathlib.Path) -> bool:
    return (path / "dataset_dict.json").is_file() or (path / "state.json").is_file()


def load_hf(path, *, cache_dir=None) -> dict[str, Any]:
    """{split: `datasets.Dataset`} of `path` (a data file, a directory of <split>.<ext> files or a saved dataset)."""
    import datasets

    path = pathlib.Path(path)
    if not path.exists():
        raise FileNotFoundError(f"data.hf_path: {path} does not exist; expected a .json/.jsonl/.parquet file, a "
                                "directory of <split>.jsonl (or .json, .parquet) files or a save_to_disk directory")
    if path.is_dir() and _is_saved_dataset(path):
        loaded = datasets.load_from_disk(str(path))
        return dict(loaded) if isinstance(loaded, datasets.DatasetDict) else {"train": loaded}
    if path.is_file():
        files = {"train": path}
    else:
        files = {p.stem: p for p in sorted(path.iterdir()) if p.stem in SPLITS and p.suffix in FILE_FORMATS}
        if "train" not in files:
            raise FileNotFoundError(f"data.hf_path: {path} holds neither a saved dataset (dataset_dict.json or "
                                    f"state.json) nor a train file; expected train.jsonl (or .json, .parquet) and "
                                    f"optionally validation / test files of the same format")
    formats = {FILE_FORMATS.get(p.suffix) for p in files.values()}
    if None in formats or len(formats) > 1:
        raise ValueError(f"data.hf_path: {path}: expected .json, .jsonl or .parquet files of one format, got "
                         f"{sorted(p.name for p in files.values())}")
    from reasoner.distributed import primary_first

    file_format = formats.pop()
    try:  # process 0 fills the Arrow cache, the other processes of a job then read it
        loaded = primary_first(f"hf_datasets:{path}", lambda: datasets.load_dataset(
            file_format, data_files={s: str(p) for s, p in files.items()},
            cache_dir=None if cache_dir is None else str(cache_dir)))
    except Exception as err:  # noqa: BLE001 - Arrow / datasets raise many types for a bad file
        from reasoner.data.jsonl import iter_jsonl

        for p in files.values():  # Arrow's parse errors name neither the file nor the line: ours do
            if p.suffix == ".jsonl" or _json_lines(p):
                for _ in iter_jsonl(p, what="one record (row) per line"):
                    pass
        raise ValueError(f"data.hf_path: {path}: the datasets library could not read "
                         f"{sorted(p.name for p in files.values())}: {type(err).__name__}: {err}") from err
    return dict(loaded)


def _json_lines(path: pathlib.Path) -> bool:
    """Whether a .json file that `datasets` could not read is JSON Lines (TRL's datasets often are): it is not one
    JSON document, and its first non-blank line is a JSON object of its own (a pretty-printed document's is not)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        json.loads(text)
        return False
    except ValueError:
        pass
    first = next((line for line in text.splitlines() if line.strip()), "")
    try:
        return isinstance(json.loads(first), dict)
    except ValueError:
        return False


def detect_format(columns, *, kind: str, where: str) -> tuple[str, ...]:
    """The first of TRL's column sets for `kind` that `columns` hold; a ValueError listing them otherwise."""
    if kind not in FORMATS:
        raise ValueError(f"kind={kind!r}; expected one of {tuple(FORMATS)}")
    for wanted in FORMATS[kind]:
        if set(wanted) <= set(columns):
            return wanted
    expected = " or ".join(str(list(w)) for w in FORMATS[kind])
    raise ValueError(f"{where}: the columns {sorted(columns)} match none of TRL's {kind} formats; expected the "
                     f"columns {expected}")


def _drop_nones(value):
    """Arrow stores a list of messages as structs of every key any message has, filling the rest with None (a user
    message gets `name: None` when a tool message has `name`): drop those keys, as transformers' chat templating
    does, so templates see the messages that were written."""
    if isinstance(value, list):
        return [_drop_nones(v) for v in value]
    if isinstance(value, dict):
        return {k: _drop_nones(v) for k, v in value.items() if v is not None}
    return value


def example_from_row(row: dict[str, Any], *, kind: str, columns: tuple[str, ...], where: str) -> dict[str, Any]:
    """One dataset row in format `columns` -> our example dict (`chat_jsonl.normalize_record`'s, or {"text"})."""
    from reasoner.data.chat_jsonl import messages_of, normalize_record, tool_schemas

    if columns == ("text",):
        return normalize_record({"text": row["text"]}, kind="sft", where=where)
    # a None cell (a row without that field in a JSON file) is a missing field: normalize_record names it, and a
    # DPO row without a prompt takes the implicit one (TRL's optional shared prompt)
    record = {k: _drop_nones(row[k]) for k in columns if row[k] is not None}
    if row.get("tools") is not None:
        record["tools"] = tool_schemas(_drop_nones(row["tools"]), where=where)
    if row.get("chat_template_kwargs") is not None:  # checked by normalize_record / normalize_unpaired
        record["chat_template_kwargs"] = _drop_nones(row["chat_template_kwargs"])
    if kind == "kto":  # the unpaired format (paired rows are unpaired in `examples_of`)
        from reasoner.data.unpaired import normalize_unpaired

        return normalize_unpaired(record, where=where)
    if kind == "prompt":
        prompt = record.get("prompt")
        if not (isinstance(prompt, str) and prompt.strip()) and not (isinstance(prompt, list) and prompt):
            raise ValueError(f"{where}: prompt must be a non-empty string or list of messages, got {prompt!r:.80}")
        if isinstance(prompt, list):  # the message rule of every chat input (a bad message fails here, named)
            record["prompt"] = messages_of(prompt, where=where, field="prompt")
        return {**{k: _drop_nones(v) for k, v in row.items()}, **record}
    return normalize_record(record, kind=kind, where=where)


def examples_of(dataset, *, kind: str, name: str) -> ChatRows:
    """Every row of one `datasets.Dataset` as our examples (validated now, so a bad row fails before training)."""
    columns = detect_format(dataset.column_names, kind=kind, where=name)
    if kind == "kto" and "label" not in columns:  # paired rows: validated as DPO pairs, then unpaired
        from reasoner.data.unpaired import unpair

        pairs = [example_from_row(row, kind="dpo", columns=columns, where=f"{name}, row {i}")
                 for i, row in enumerate(dataset.to_list())]
        return ChatRows(name=name, rows=unpair(pairs))
    return ChatRows(name=name, rows=[example_from_row(row, kind=kind, columns=columns, where=f"{name}, row {i}")
                                     for i, row in enumerate(dataset.to_list())])


def load_chat_splits(path, *, kind: str, split: str = "train", cache_dir=None) -> dict[str, ChatRows]:
    """{"train": `split`, "validation": the "validation" split when there is one} of `path`, as `kind` examples."""
    splits = load_hf(path, cache_dir=cache_dir)
    if split not in splits:
        raise ValueError(f"data.hf_split={split!r}: {path} has the splits {sorted(splits)}")
    out = {"train": examples_of(splits[split], kind=kind, name=f"{path} [{split}]")}
    if split != "validation" and "validation" in splits:
        out["validation"] = examples_of(splits["validation"], kind=kind, name=f"{path} [validation]")
    return out


def load_rows(path, *, split: str, prompts: bool, cache_dir=None) -> list[dict[str, Any]]:
    """The rows of `split` (GRPO's source), every column kept for the rewards; with `prompts` each row must carry a
    `prompt` (task "chat"), else the task builds the prompt from the row's fields (`trainers.data.as_example`)."""
    splits = load_hf(path, cache_dir=cache_dir)
    if split not in splits:
        raise ValueError(f"data.hf_split={split!r}: {path} has the splits {sorted(splits)}")
    if prompts:
        return list(examples_of(splits[split], kind="prompt", name=f"{path} [{split}]").rows)
    return [_drop_nones(row) for row in splits[split].to_list()]
