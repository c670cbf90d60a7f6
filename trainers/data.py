"""Where a trainer's examples come from.

SFT / DPO (`load_splits`): `config.data.hf_path`, when set, is a Hugging Face `datasets` file or directory in TRL's
formats (`reasoner.data.hf_datasets`; `data.hf_split` is the split trained on, a "validation" split evaluates), and
`data.source` / `data.path` are not read. Otherwise by `config.data.source`:
  "jsonl": `config.data.path` is a directory of train/validation/test .jsonl files (see
           `reasoner.data.chat_jsonl`), built once into `config.data.tfds_dir` (default: workdir/tfds).
  "tfds":  `config.data.name` is a registered TFDS builder read with `tfds.data_source` from
           `config.data.tfds_dir`; its records must carry the chat fields (prompt, completion | chosen, rejected).
KTO (kind "kto"): `data.hf_path` as above, or `data.source` "jsonl": `data.path` is a directory of <split>.jsonl files
(or one .jsonl file) of TRL's unpaired {prompt, completion, label} records or of paired ones, read as they are
(`reasoner.data.unpaired.read_jsonl_splits`, errors naming file and line); "tfds" is not read for KTO.
GRPO (`load_examples`): rows of `data.hf_path` (its `prompt` column; split "train" reads `data.hf_split`), of
`data.path`/<split>.jsonl or of the TFDS builder `data.name`, turned into examples
(`prompt` plus what the rewards read) by `as_example` for `data.task` "chat", "astar" or "smt"; `PromptStream`
draws them `per_step` at a time (the GRPO loop's checkpointable source).
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Mapping

import numpy as np


def load_splits(data_cfg, *, kind: str, workdir) -> dict:
    """{split: random-access source of chat dicts} for `kind` in {'sft', 'dpo', 'kto'}."""
    if data_cfg.get("hf_path"):
        from reasoner.data.hf_datasets import load_chat_splits

        return load_chat_splits(data_cfg.hf_path, kind=kind, split=data_cfg.get("hf_split") or "train",
                                cache_dir=pathlib.Path(workdir) / "hf_datasets")
    if kind == "kto":
        from reasoner.data.unpaired import read_jsonl_splits

        if data_cfg.source != "jsonl" or not data_cfg.get("path"):
            raise ValueError(f"KTO data: data.source={data_cfg.source!r}, data.path={data_cfg.get('path')!r}; "
                             "expected data.hf_path, or data.source='jsonl' with data.path a directory of train.jsonl")
        return read_jsonl_splits(data_cfg.path)
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


def load_prepared(config, *, kind: str, prepare, tokenizer, workdir, splits=None, **options):
    """(train rows, validation rows or None, stats) of `config.data`: `splits` (default: `load_splits` of `kind`)
    through `prepare(examples, tokenizer, seq_len=, overflow=, split=, **options)`, the trainer's tokenizer and
    packer (SFT's `prepare_sft`, DPO's `prepare_dpo`, KTO's `prepare_kto`)."""
    if splits is None:
        splits = load_splits(config.data, kind=kind, workdir=workdir)
    else:  # rows handed over in memory (the pipelines) pass the same checks as a JSONL file's lines
        splits = {name: normalized(rows, kind=kind, split=name) for name, rows in splits.items()}
    d = config.data
    rows, stats = prepare(splits["train"], tokenizer, seq_len=d.seq_len, overflow=d.overflow, split="train",
                          **options)
    val_rows = None
    if "validation" in splits:
        val_rows, _ = prepare(splits["validation"], tokenizer, seq_len=d.seq_len, overflow=d.overflow,
                              split="validation", **options)
    return rows, val_rows, stats


def normalized(rows, *, kind: str, split: str) -> list[dict]:
    """`rows` as the JSONL reader would give them (`chat_jsonl.normalize_record`, KTO's `normalize_unpaired`, which
    keep a row's `chat_template_kwargs` for the chat template as they keep its tools): a
    missing field, a completion that is a number or a label that is a string is a ValueError naming the split and
    row (a KeyError or TypeError deep in tokenization before, and `float(bool("false"))` read a KTO label as
    desirable)."""
    from reasoner.data.chat_jsonl import normalize_record
    from reasoner.data.unpaired import normalize_unpaired

    out = []
    for i, row in enumerate(rows):
        where = f"{split} split, row {i}"
        if not isinstance(row, dict):
            raise ValueError(f"{where}: expected a dict, got {type(row).__name__}")
        out.append(normalize_unpaired(row, where=where) if kind == "kto" else
                   normalize_record(row, kind=kind, where=where))
    return out


def batch_iterator(config, rows: dict):
    """The checkpointable `BatchIterator` over tokenized `rows`: `train.batch_size` x `train.grad_accum` rows a step
    for `train.num_epochs` epochs, shuffled from `config.seed`."""
    from reasoner.data.pipeline import BatchIterator

    t = config.train
    return BatchIterator(rows, batch_size=t.batch_size, grad_accum=t.grad_accum, seed=config.seed,
                         num_epochs=t.num_epochs)


def load_examples(data_cfg, *, split: str) -> list[dict]:
    """Examples of `split` from `data.hf_path` or `data.source` "jsonl" (`data.path`/<split>.jsonl) or "tfds"
    (`data.name`). A row `as_example` cannot use is a ValueError naming its file and line ("<path>:<line>") or its
    dataset and row."""
    if data_cfg.get("hf_path"):
        from reasoner.data.hf_datasets import load_rows

        hf_split = (data_cfg.get("hf_split") or "train") if split == "train" else split
        rows = load_rows(data_cfg.hf_path, split=hf_split, prompts=data_cfg.task == "chat")
        where = [f"{data_cfg.hf_path} [{hf_split}], row {i}" for i in range(len(rows))]
    elif data_cfg.source == "jsonl":
        from reasoner.data.jsonl import iter_jsonl

        path = pathlib.Path(data_cfg.path)
        path = path / f"{split}.jsonl" if path.is_dir() else path
        if not path.exists():
            raise FileNotFoundError(f"data.path: {path} does not exist; expected a .jsonl file or a directory "
                                    f"holding {split}.jsonl")
        numbered = list(iter_jsonl(path, what=f"one data.task={data_cfg.task!r} row per line"))
        rows, where = [row for _, row in numbered], [f"{path}:{n}" for n, _ in numbered]
    elif data_cfg.source == "tfds":
        import tensorflow_datasets as tfds

        builder = tfds.builder(data_cfg.name, data_dir=data_cfg.tfds_dir or None, file_format="array_record")
        source = builder.as_data_source(split=split)
        rows = [dict(source[i]) for i in range(len(source))]
        where = [f"{data_cfg.name} [{split}], row {i}" for i in range(len(rows))]
    else:
        raise ValueError(f"data.source={data_cfg.source!r}: expected 'jsonl' or 'tfds'")
    if data_cfg.get("limit"):
        rows = rows[: int(data_cfg.limit)]
    out = []
    for row, at in zip(rows, where):
        try:
            out.append(as_example(row, task=data_cfg.task, dataset=data_cfg.dataset))
        except (ValueError, KeyError, TypeError) as err:  # a task's record check names the record, not its line
            reason = err.args[0] if isinstance(err, KeyError) and err.args else err
            raise ValueError(f"{at}: {reason}") from err
    return out


def as_example(row: Mapping, *, task: str, dataset: str = "deeprd") -> dict:
    """A row ready for rollout and rewards: `prompt` plus the fields the rewards read. A row that already has a
    `prompt` is taken as is (task "chat")."""
    if "prompt" in row or task == "chat":
        if "prompt" not in row:
            raise ValueError(f"row {str(row)[:120]}: expected a 'prompt' field (chat messages or a string)")
        return dict(row)
    if task == "astar":
        from reasoner.tasks.astar import problem_from_record, prompt_messages

        problem = problem_from_record(row, dataset=dataset)
        return {**problem.record, "prompt": prompt_messages(problem)}
    if task == "smt":  # a Logic-LLM record, prompted exactly as the SMT scratchpad evaluation prompts it
        from reasoner.rewards.match import logic_problem
        from reasoner.tasks.logic_llm import render_messages

        return {**row, "prompt": render_messages(logic_problem(row, dataset=dataset))}
    raise ValueError(f"data.task={task!r}: expected 'chat', 'astar' or 'smt'")


def prompt_token_ids(tokenizer, prompt) -> list[int]:
    """Chat messages -> the chat template with the generation prompt; a string -> its tokens as TRL's GRPOTrainer
    tokenizes a plain-text prompt, with the tokenizer's BOS where it adds one (`tokenization.encode_prompt`)."""
    from reasoner.tokenization import chat_ids, encode_prompt

    return encode_prompt(tokenizer, prompt) if isinstance(prompt, str) else chat_ids(tokenizer, list(prompt))


@dataclasses.dataclass
class PromptStream:
    """Prompt indices, `per_step` at a time for `total_steps` steps, reshuffled every epoch from `seed`;
    checkpointable by `step` (`get_state` / `set_state`), iterable like the SFT/DPO `BatchIterator`."""

    size: int
    per_step: int
    seed: int
    total_steps: int = 0
    step: int = 0

    def __post_init__(self):
        if self.size < 1:
            raise ValueError("the prompt dataset is empty: expected at least one example")

    def next(self) -> list[int]:
        out = []
        for i in range(self.step * self.per_step, (self.step + 1) * self.per_step):
            epoch, pos = divmod(i, self.size)
            out.append(int(np.random.default_rng([self.seed, epoch]).permutation(self.size)[pos]))
        self.step += 1
        return out

    def __iter__(self):
        return self

    def __next__(self) -> list[int]:
        if self.step >= self.total_steps:
            raise StopIteration
        return self.next()

    def get_state(self) -> dict:
        return {"step": self.step, "size": self.size, "per_step": self.per_step, "seed": self.seed}

    def set_state(self, state: Mapping) -> None:
        """Resumes at `state["step"]`; a state saved over another prompt set, step size or seed (checked where the
        state records them) is a ValueError: the stream would silently go on over other prompts."""
        saved = {k: state[k] for k in ("size", "per_step", "seed") if k in state}
        ours = {k: getattr(self, k) for k in saved}
        if saved != ours:
            raise ValueError(f"prompt stream state {dict(state)} was saved over {saved} (prompts, prompts per step, "
                             f"seed); this run has {ours}: resume with the same prompts and grpo settings, or use "
                             "another --workdir")
        self.step = int(state["step"])
