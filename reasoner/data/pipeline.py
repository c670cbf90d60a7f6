"""Training data: tokenize chat examples, handle over-long ones, pack or pad, batch with grain.

`prepare_sft(examples, tokenizer, seq_len=..., overflow=...)` and `prepare_dpo(...)` turn a
random-access source of chat examples (e.g. `reasoner.data.chat_jsonl`) into fixed-length int32
row arrays plus `DataStats` (examples, truncated, dropped). `overflow="truncate"` cuts a sequence
to `seq_len` (keeping the prompt start), `"drop"` discards it; both are counted. A dataset whose
rows carry no completion tokens raises `NoCompletionTokensError`. DPO pairs (and KTO's examples) are tokenized as
TRL 1.16 tokenizes them (`reasoner.data.preference_tokens`).

`BatchIterator` serves [A, B, T] batches (A = gradient-accumulation micro-batches, B rows each):
each epoch is a grain `MapDataset` over the rows, shuffled with seed `seed + epoch` and batched
with `drop_remainder`. Its whole state is `{"step": n}` (batches served so far), so restoring it
from a checkpoint reproduces the exact batch sequence. `to_global_batch` places a host batch on
the mesh with the row axis split over the mesh axes the sharding rules give the logical `batch` axis.

Across processes every process builds the same iterator (same rows, same seed) and so holds the
whole global batch; `to_global_batch` hands each device only its rows
(`jax.make_array_from_callback` asks for the addressable shards alone), so a 2-process job and a
1-process job over the same mesh see identical global arrays. Tokenizing on every process costs
host time, not correctness; at these data sizes that is cheaper than a cross-process exchange.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import grain
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from reasoner.data.packing import pack_documents, pad_documents
from reasoner.sharding import Rules, active_rules

OVERFLOW_MODES = ("truncate", "drop")


class NoCompletionTokensError(ValueError):
    """The dataset has no completion (trained) tokens, so there is nothing to learn from."""


@dataclasses.dataclass
class DataStats:
    """Counts from preparing one split; reported in metrics and logs."""

    examples: int = 0
    """Examples (DPO: preference pairs) read from the split."""
    kept: int = 0
    """Examples (pairs) in the rows."""
    truncated: int = 0
    """Examples (pairs) over `seq_len` cut to it (`overflow="truncate"`); an SFT example cut down to no completion
    token counts here and in `dropped`."""
    dropped: int = 0
    """Examples (pairs) left out: over `seq_len` with `overflow="drop"`, or without a completion token in `seq_len`."""
    rows: int = 0
    """Rows of `seq_len` tokens: SFT's packed or padded rows, one per DPO pair."""
    completion_tokens: int = 0
    """Completion (trained) tokens in the rows, both sides of a DPO pair."""
    prompt_cut: int = 0
    """SFT / DPO / KTO examples whose tokenized prompt is not a prefix of the tokenized prompt + completion: the
    prompt's tail is left out, as TRL leaves it out (`reasoner.data.chat_masks.prompt_length`; warned once)."""

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


def _fit(ids: Sequence[int], mask: Sequence[int], *, seq_len: int, overflow: str, stats: DataStats):
    """Applies the overflow rule; returns (ids, mask) or None when dropped."""
    if len(ids) <= seq_len:
        return list(ids), list(mask)
    if overflow == "drop":
        stats.dropped += 1
        return None
    stats.truncated += 1
    return list(ids[:seq_len]), list(mask[:seq_len])


def row_location(examples, index: int, *, split: str) -> str:
    """Where example `index` came from, for an error: the source's own `where(index)` ("<file>:<line>" of a JSONL
    record, `chat_jsonl.DecodedSource`) or "<name>, row <index>" (`hf_datasets.ChatRows` names its file)."""
    where = getattr(examples, "where", None)
    located = where(index) if callable(where) else None
    return located or f"{getattr(examples, 'name', None) or f'{split} split'}, row {index}"


def prepare_sft(
    examples: Sequence[dict[str, Any]],
    tokenizer,
    *,
    seq_len: int,
    overflow: str = "truncate",
    packing: bool = True,
    split: str = "train",
) -> tuple[dict[str, np.ndarray], DataStats]:
    """Tokenized rows {tokens, positions, segment_ids, loss_mask} [R, seq_len] of SFT examples ({prompt,
    completion, tools?, chat_template_kwargs?} or {text}; the loss mask is
    `reasoner.data.chat_masks.encode_sft_example`'s; a prompt cut as TRL cuts it is counted in `stats.prompt_cut`)."""
    from reasoner.data.chat_masks import encode_sft_example

    if overflow not in OVERFLOW_MODES:
        raise ValueError(f"data.overflow={overflow!r}; expected one of {OVERFLOW_MODES}")
    stats = DataStats()
    docs = []
    for i in range(len(examples)):
        ex = examples[i]
        stats.examples += 1
        # assistant-only mask (chat_masks); an error names the file and line (or row) of the example
        pc = encode_sft_example(tokenizer, ex, where=row_location(examples, i, split=split), stats=stats)
        fitted = _fit(pc.ids, pc.completion_mask, seq_len=seq_len, overflow=overflow, stats=stats)
        if fitted is None:
            continue
        if not any(fitted[1]):
            # truncation cut away the whole completion: nothing to train on, so drop it
            stats.dropped += 1
            continue
        docs.append(fitted)
    stats.kept = len(docs)
    pad_id = int(tokenizer.pad_token_id or 0)
    rows = (pack_documents if packing else pad_documents)(docs, seq_len=seq_len, pad_id=pad_id) if docs else None
    stats.completion_tokens = int(rows["loss_mask"].sum()) if rows is not None else 0
    if stats.completion_tokens == 0:
        raise NoCompletionTokensError(
            f"{split} split: no completion tokens after tokenization ({stats.as_dict()}); "
            f"expected examples with a non-empty completion that fits in seq_len={seq_len}"
        )
    stats.rows = len(rows["tokens"])
    return rows, stats


def prepare_dpo(
    examples: Sequence[dict[str, Any]],
    tokenizer,
    *,
    seq_len: int,
    overflow: str = "drop",
    split: str = "train",
) -> tuple[dict[str, np.ndarray], DataStats]:
    """Rows {chosen_*, rejected_*} for tokens/positions/segment_ids/loss_mask [P, seq_len], one pair per row.

    Each pair ({prompt, chosen, rejected, tools?, chat_template_kwargs?}: all plain text, or a message prompt with
    message or text completions) is tokenized as TRL 1.16's DPOTrainer tokenizes it
    (`reasoner.data.preference_tokens`): the prompt is the common prefix of the prompt's ids and both joined
    sequences, each side the rest of its own; a prompt that loses its tail is warned once and counted in
    `stats.prompt_cut`. Sequences are prompt + side, right-padded; the loss mask is 1 on the side's ids (tool turns
    inside a multi-turn side excepted).

    Over-long pairs (either side over `seq_len`): "drop" (the default) leaves the pair out; "truncate" keeps the
    first `seq_len` tokens of each side (TRL's `truncation_mode="keep_start"` with `max_length=seq_len`) and leaves
    out a pair a side of which keeps no trained token (TRL drops a prompt of `max_length` tokens or more, which is
    the same pair unless a side's first trained token is past a masked tool turn). TRL truncates by default
    (`max_length=1024`) and also offers `keep_end`, which we do not.
    """
    from reasoner.data.preference_tokens import tokenize_preference

    if overflow not in OVERFLOW_MODES:
        raise ValueError(f"data.overflow={overflow!r}; expected one of {OVERFLOW_MODES}")
    stats = DataStats()
    chosen_docs, rejected_docs = [], []
    for i in range(len(examples)):
        stats.examples += 1
        pair = tokenize_preference(tokenizer, examples[i], keys=("chosen", "rejected"),
                                   where=row_location(examples, i, split=split), stats=stats)
        sides = [pair.sequence(0), pair.sequence(1)]
        truncated = any(len(pc.ids) > seq_len for pc in sides)
        if truncated and overflow == "drop":
            stats.dropped += 1
            continue
        sides = [(list(pc.ids[:seq_len]), list(pc.completion_mask[:seq_len])) for pc in sides]
        if not all(any(mask) for _, mask in sides):
            stats.dropped += 1
            continue
        stats.truncated += int(truncated)
        chosen_docs.append(sides[0])
        rejected_docs.append(sides[1])
    stats.kept = len(chosen_docs)
    if not chosen_docs:
        raise NoCompletionTokensError(
            f"{split} split: no preference pair with completion tokens ({stats.as_dict()}); "
            f"expected pairs whose prompt + completion fit in seq_len={seq_len}"
        )
    pad_id = int(tokenizer.pad_token_id or 0)
    rows = {}
    for prefix, docs in (("chosen", chosen_docs), ("rejected", rejected_docs)):
        for key, value in pad_documents(docs, seq_len=seq_len, pad_id=pad_id).items():
            rows[f"{prefix}_{key}"] = value
    rows["index"] = np.arange(len(chosen_docs), dtype=np.int32)
    stats.rows = len(chosen_docs)
    stats.completion_tokens = int(rows["chosen_loss_mask"].sum() + rows["rejected_loss_mask"].sum())
    return rows, stats


class _RowSource:
    """grain random-access source over a dict of equally long arrays."""

    def __init__(self, rows: dict[str, np.ndarray]):
        self._rows = rows
        self._len = len(next(iter(rows.values())))

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        return {k: v[index] for k, v in self._rows.items()}


class BatchIterator:
    """Deterministic, checkpointable iterator of [A, B, ...] batches over `num_epochs` epochs."""

    def __init__(self, rows: dict[str, np.ndarray], *, batch_size: int, grad_accum: int = 1, seed: int,
                 num_epochs: int, shuffle: bool = True):
        self.rows = rows
        self.batch_size, self.grad_accum, self.seed = batch_size, grad_accum, seed
        self.num_epochs, self.shuffle = num_epochs, shuffle
        self.rows_per_step = batch_size * grad_accum
        n = len(next(iter(rows.values())))
        self.steps_per_epoch = n // self.rows_per_step
        if self.steps_per_epoch == 0:
            raise ValueError(
                f"{n} rows cannot fill one step of batch_size {batch_size} x grad_accum {grad_accum}; "
                f"expected at least {self.rows_per_step} rows (more data, smaller batch, or shorter seq_len)"
            )
        self.total_steps = self.steps_per_epoch * num_epochs
        self.step = 0
        self._epoch_ds: tuple[int, Any] | None = None

    def _dataset(self, epoch: int):
        if self._epoch_ds is None or self._epoch_ds[0] != epoch:
            ds = grain.MapDataset.source(_RowSource(self.rows))
            if self.shuffle:
                ds = ds.shuffle(seed=self.seed + epoch)
            self._epoch_ds = (epoch, ds.batch(self.rows_per_step, drop_remainder=True))
        return self._epoch_ds[1]

    @property
    def epoch(self) -> int:
        return self.step // self.steps_per_epoch

    def __iter__(self):
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        if self.step >= self.total_steps:
            raise StopIteration
        epoch, j = divmod(self.step, self.steps_per_epoch)
        flat = self._dataset(epoch)[j]
        self.step += 1
        return {k: v.reshape(self.grad_accum, self.batch_size, *v.shape[1:]) for k, v in flat.items()}

    def get_state(self) -> dict[str, int]:
        return {"step": self.step, "seed": self.seed, "rows_per_step": self.rows_per_step}

    def set_state(self, state: dict[str, int]) -> None:
        if state.get("seed") != self.seed or state.get("rows_per_step") != self.rows_per_step:
            raise ValueError(
                f"data iterator state {state} was saved with a different seed or batch layout; "
                f"expected seed={self.seed}, rows_per_step={self.rows_per_step}"
            )
        self.step = int(state["step"])


def eval_batches(rows: dict[str, np.ndarray], *, batch_size: int) -> list[dict[str, np.ndarray]]:
    """All rows in order as [1, B, ...] batches; the last one is filled with empty rows (segment 0, no loss)."""
    n = len(next(iter(rows.values())))
    out = []
    for start in range(0, n, batch_size):
        chunk = {k: v[start:start + batch_size] for k, v in rows.items()}
        short = batch_size - len(next(iter(chunk.values())))
        if short:
            chunk = {k: np.concatenate([v, np.zeros((short, *v.shape[1:]), v.dtype)]) for k, v in chunk.items()}
        out.append({k: v[None] for k, v in chunk.items()})
    return out


def batch_axes(mesh: Mesh, rules: Rules | None = None) -> tuple[str, ...]:
    """Mesh axes (size > 1) the rows of a batch are split over: the rules' entry for logical `batch`."""
    target = dict(active_rules() if rules is None else rules).get("batch")
    names = (target,) if isinstance(target, str) else tuple(target or ())
    return tuple(a for a in names if a in mesh.shape and mesh.shape[a] > 1)


def batch_sharding(mesh: Mesh, *, ndim: int, rules: Rules | None = None) -> NamedSharding:
    """Sharding of an [A, B, ...] batch leaf: rows over the mesh's batch axes, the rest replicated."""
    axes = batch_axes(mesh, rules)
    row_spec = axes if len(axes) > 1 else (axes[0] if axes else None)
    return NamedSharding(mesh, PartitionSpec(None, row_spec, *([None] * (ndim - 2))))


def to_global_batch(batch: dict[str, np.ndarray], mesh: Mesh, *, rules: Rules | None = None) -> dict[str, jax.Array]:
    """Host batch (every process holds the full global batch) -> global arrays laid out over the mesh."""
    axes = batch_axes(mesh, rules)
    split = int(np.prod([mesh.shape[a] for a in axes]))
    out = {}
    for key, value in batch.items():
        sharding = batch_sharding(mesh, ndim=value.ndim, rules=rules)
        if value.shape[1] % split:
            raise ValueError(
                f"batch field {key!r} has {value.shape[1]} rows per micro-batch, which the mesh's batch axes "
                f"({' x '.join(axes)} = {split}) do not divide; expected train.batch_size to be a multiple of {split}")
        out[key] = jax.make_array_from_callback(value.shape, sharding, lambda idx, v=value: v[idx])
    return out
