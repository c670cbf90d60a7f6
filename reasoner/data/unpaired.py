"""Unpaired preference data (KTO): TRL's `prompt` / `completion` / `label` rows, tokenized rows, and the mismatched
(prompt, completion) pairs of KTO's KL estimate.

Records (our JSONL lines and `datasets` rows alike; `reasoner.data.hf_datasets` reads the latter):

  {"prompt": str | [messages], "completion": str | [messages], "label": true | false, "tools"?: [...],
   "chat_template_kwargs"?: {...}}
  {"prompt"?, "chosen", "rejected"}   paired preference data, unpaired as TRL's KTOTrainer does
                                      (`trl.data_utils.unpair_preference_dataset`: per chunk of 1000 pairs, the
                                      chosen completions labelled true, then the rejected ones labelled false)

`label` must be a JSON boolean: true marks a desirable completion. A missing or null label, a number or a string is a
`ValueError` naming the file and row (nothing is skipped, as for our other JSONL readers). Prompts and completions
follow `chat_jsonl.normalize_record` (a plain-string prompt is one user message; a completion given as messages may
hold tool turns, which are masked out of the loss).

`chat_template_kwargs` (TRL's per-row template variables) is kept with the example, and with both examples of an
unpaired pair (`chat_jsonl.normalize_record` keeps it), and reaches the chat template
(`reasoner.data.preference_tokens`).

`prepare_kto` tokenizes each example once, as TRL's KTOTrainer does (`reasoner.data.preference_tokens`), one example
per row, and keeps each completion's tokens apart (`completion_*`), so that `with_kl_rows` can build, for every row i
of a micro-batch, TRL's KL sequence prompt_i + completion_{i-1} (the completions rotated by one within the
micro-batch, as TRL's `add_kl_completion_ids` does per batch of `per_device_train_batch_size`), truncated at
`seq_len` like TRL's collator (`max_length`, keeping the start). The KL rows are built on the host at batch time,
after shuffling, so the mismatched completions of a batch are the batch's own completions, whatever the order of the
epoch.
"""

from __future__ import annotations

import pathlib
from typing import Any, Sequence

import numpy as np

from reasoner.data.pipeline import OVERFLOW_MODES, DataStats, NoCompletionTokensError, row_location

SPLITS = ("train", "validation", "test")
UNPAIR_CHUNK = 1000  # `datasets.Dataset.map(batched=True)`'s default batch size, which TRL's unpairing runs under
ROW_FIELDS = ("tokens", "positions", "segment_ids", "loss_mask")  # what the device reads of each sequence
KL_FIELDS = tuple(f"kl_{f}" for f in ROW_FIELDS)
HOST_FIELDS = ("prompt_len", "completion_tokens", "completion_mask", "completion_len")  # host only: KL assembly


def normalize_unpaired(record: dict[str, Any], *, where: str) -> dict[str, Any]:
    """One {prompt, completion, label, tools?, chat_template_kwargs?} record -> {"prompt": [messages], "completion":
    str | [messages], "label": bool, "tools": list | None, "chat_template_kwargs"?: dict}; a one-line ValueError
    naming `where` otherwise."""
    from reasoner.data.chat_jsonl import normalize_record

    missing = [k for k in ("prompt", "completion", "label") if record.get(k) is None]
    if missing:
        raise ValueError(f"{where}: missing {missing}; an unpaired (KTO) record needs prompt, completion and label "
                         "(true: desirable, false: undesirable), or prompt, chosen and rejected")
    label = record["label"]
    if not isinstance(label, (bool, np.bool_)):
        raise ValueError(f"{where}: label must be true or false (a JSON boolean), got {label!r:.40} "
                         f"({type(label).__name__})")
    out = normalize_record({k: record[k] for k in ("prompt", "completion", "tools", "chat_template_kwargs")
                            if k in record}, kind="sft", where=where)
    return {**out, "label": bool(label)}


def unpair(pairs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Paired records, already through `chat_jsonl.normalize_record(kind="dpo")` -> unpaired records, in TRL's
    order."""
    out = []
    for start in range(0, len(pairs), UNPAIR_CHUNK):
        chunk = pairs[start:start + UNPAIR_CHUNK]
        for key, label in (("chosen", True), ("rejected", False)):
            out += [{"prompt": p["prompt"], "completion": p[key], "label": label, "tools": p["tools"],
                     **{k: p[k] for k in ("chat_template_kwargs",) if k in p}} for p in chunk]
    return out


def read_jsonl_splits(path) -> dict[str, Any]:
    """{split: `hf_datasets.ChatRows`} of a directory of <split>.jsonl files (or one .jsonl file: "train") of unpaired
    or paired records; errors name "<file>:<line>"."""
    from reasoner.data.chat_jsonl import normalize_record
    from reasoner.data.hf_datasets import ChatRows
    from reasoner.data.jsonl import iter_jsonl

    root = pathlib.Path(path)
    files = {"train": root} if root.is_file() else {s: root / f"{s}.jsonl" for s in SPLITS
                                                     if (root / f"{s}.jsonl").is_file()}
    if "train" not in files:
        raise FileNotFoundError(f"data.path: {root} holds no train.jsonl; expected a directory of train.jsonl (and "
                                "optionally validation.jsonl, test.jsonl) or one .jsonl file of KTO records")
    out = {}
    for split, file in files.items():
        lines = list(iter_jsonl(file, what="one {prompt, completion, label} record per line"))
        if not lines:
            raise ValueError(f"{file} is empty: expected one {{prompt, completion, label}} record per line")
        numbers = [n for n, _ in lines]
        if "label" in lines[0][1] or "completion" in lines[0][1]:
            rows = [normalize_unpaired(r, where=f"{file}:{n}") for n, r in lines]
        else:  # paired preference records, unpaired with their line numbers in the same order
            rows = unpair([normalize_record(r, kind="dpo", where=f"{file}:{n}") for n, r in lines])
            numbers = [n for start in range(0, len(numbers), UNPAIR_CHUNK) for _ in ("chosen", "rejected")
                       for n in numbers[start:start + UNPAIR_CHUNK]]
        out[split] = ChatRows(name=str(file), rows=rows, lines=tuple(numbers))
    return out


# ---------------------------------------------------------------------------------------------------- tokenized rows
def prepare_kto(examples: Sequence[dict[str, Any]], tokenizer, *, seq_len: int, overflow: str = "truncate",
                split: str = "train") -> tuple[dict[str, np.ndarray], DataStats]:
    """Rows of unpaired examples, one example per row (no packing: the loss is per sequence):
      tokens / positions / segment_ids / loss_mask [N, seq_len]   prompt + completion, right-padded
      label [N] float32 (1 = desirable), index [N] (the example's position in `examples`)
      prompt_len [N], completion_tokens / completion_mask [N, seq_len], completion_len [N]   (for `with_kl_rows`)
    Each example is tokenized as TRL 1.16's KTOTrainer tokenizes it (`reasoner.data.preference_tokens`, with one
    completion: the prompt is the common prefix of the prompt's ids and prompt + completion's, per example; plain
    text or messages, `tools` and `chat_template_kwargs` per row); a prompt that loses its tail is warned once and
    counted in `stats.prompt_cut`. The KL rows then join this (possibly cut) prompt with another row's completion
    ids, as TRL's `KL_completion_ids` do.
    overflow "truncate" keeps the first `seq_len` tokens (TRL's collator with `max_length=seq_len`) and drops an
    example whose prompt fills `seq_len` (TRL drops `len(prompt_ids) >= max_length` whatever its truncation mode) or
    that keeps no trained token (a first trained token past a masked tool turn); "drop" drops every over-long
    example."""
    from reasoner.data.preference_tokens import tokenize_preference

    if overflow not in OVERFLOW_MODES:
        raise ValueError(f"data.overflow={overflow!r}; expected one of {OVERFLOW_MODES}")
    stats = DataStats()
    kept: list[tuple[int, Any]] = []
    for i in range(len(examples)):
        stats.examples += 1
        pc = tokenize_preference(tokenizer, examples[i], keys=("completion",),
                                 where=row_location(examples, i, split=split), stats=stats).sequence(0)
        over = len(pc.ids) > seq_len
        if (over and overflow == "drop") or pc.prompt_len >= seq_len or not any(pc.completion_mask[:seq_len]):
            stats.dropped += 1
            continue
        stats.truncated += int(over)
        kept.append((i, pc))
    stats.kept = stats.rows = len(kept)
    if not kept:
        raise NoCompletionTokensError(f"{split} split: no example with completion tokens ({stats.as_dict()}); "
                                      f"expected prompts shorter than seq_len={seq_len}")
    pad_id = int(tokenizer.pad_token_id or 0)
    n = len(kept)
    rows = {f: np.zeros((n, seq_len), np.int32) for f in ROW_FIELDS}
    rows["tokens"][:] = pad_id
    rows["completion_tokens"] = np.full((n, seq_len), pad_id, np.int32)
    rows["completion_mask"] = np.zeros((n, seq_len), np.int32)
    rows["prompt_len"], rows["completion_len"] = np.zeros(n, np.int32), np.zeros(n, np.int32)
    rows["label"], rows["index"] = np.zeros(n, np.float32), np.zeros(n, np.int32)
    for r, (i, pc) in enumerate(kept):
        ids, mask = np.asarray(pc.ids[:seq_len]), np.asarray(pc.completion_mask[:seq_len])
        _put(rows, r, ids, mask)
        comp, comp_mask = pc.ids[pc.prompt_len:][:seq_len], pc.completion_mask[pc.prompt_len:][:seq_len]
        rows["completion_tokens"][r, :len(comp)], rows["completion_mask"][r, :len(comp)] = comp, comp_mask
        rows["prompt_len"][r], rows["completion_len"][r] = pc.prompt_len, len(comp)
        rows["label"][r], rows["index"][r] = float(bool(examples[i]["label"])), i
    stats.completion_tokens = int(rows["loss_mask"].sum())
    return rows, stats


def _put(rows: dict[str, np.ndarray], r, ids: np.ndarray, mask: np.ndarray, prefix: str = "") -> None:
    n = len(ids)
    rows[f"{prefix}tokens"][r][:n] = ids
    rows[f"{prefix}positions"][r][:n] = np.arange(n)
    rows[f"{prefix}segment_ids"][r][:n] = 1
    rows[f"{prefix}loss_mask"][r][:n] = mask


def with_kl_rows(batch: dict[str, np.ndarray], *, pad_id: int = 0) -> dict[str, np.ndarray]:
    """A host batch [A, B, ...] of `prepare_kto` rows -> its device batch: the sequences, `label`, `index` and the KL
    sequences kl_* [A, B, T]: row b of micro-batch a is prompt_b + completion_{b-1} (b - 1 taken cyclically over the
    micro-batch's real rows; the filler rows of an evaluation batch, which have no tokens, stay empty), truncated to
    T. The host-only fields are dropped."""
    tokens = batch["tokens"]
    A, B, T = tokens.shape
    out = {k: v for k, v in batch.items() if k not in HOST_FIELDS}
    kl = {f: np.zeros((A, B, T), np.int32) for f in KL_FIELDS}
    kl["kl_tokens"][:] = pad_id
    real = batch["segment_ids"].any(axis=-1)
    for a in range(A):
        rows = np.flatnonzero(real[a])
        for b, j in zip(rows, np.roll(rows, 1)):
            p, c = int(batch["prompt_len"][a, b]), int(batch["completion_len"][a, j])
            ids = np.concatenate([tokens[a, b, :p], batch["completion_tokens"][a, j, :c]])[:T]
            mask = np.concatenate([np.zeros(p, np.int32), batch["completion_mask"][a, j, :c]])[:T]
            _put(kl, (a, b), ids, mask, prefix="kl_")
    return {**out, **kl}


class KLBatches:
    """The checkpointable source of KTO training batches: a `BatchIterator` over `prepare_kto` rows whose batches
    pass through `with_kl_rows`. Its state is the iterator's (the KL rows are a function of the batch)."""

    def __init__(self, iterator, *, pad_id: int = 0):
        self.iterator, self.pad_id = iterator, pad_id

    def __getattr__(self, name):  # step, total_steps, steps_per_epoch, epoch, batch_size, ...
        return getattr(self.iterator, name)

    def __iter__(self):
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        return with_kl_rows(next(self.iterator), pad_id=self.pad_id)

    def get_state(self) -> dict:
        return self.iterator.get_state()

    def set_state(self, state: dict) -> None:
        self.iterator.set_state(state)
