"""TFDS builder for chat SFT and DPO examples stored as JSON lines (ours and TRL's conversational formats).

Each line of `<split>.jsonl` (splits: train, validation, test; those present are built) is one of

  SFT: {"prompt": [{"role", "content"}, ...], "completion": "assistant text" | [messages after the prompt]}
       {"messages": [...]}   (TRL's conversational format: the prompt is everything before the first assistant
                              turn, the completion everything from it on)
       {"conversations": [{"from", "value"}, ...]}   (TRL's ShareGPT-style form of the same, keys renamed)
       {"text": "..."}       (TRL's language-modelling format: every token trained, EOS appended)
  DPO: {"prompt": [...], "chosen": text | [messages], "rejected": text | [messages]}
       {"chosen": [...], "rejected": [...]}   (TRL's implicit prompt: the messages both share form the prompt)

`prompt` may also be a plain string (one user message). A completion given as messages may hold several
assistant turns with tool (or user) turns between them: only the assistant tokens are trained
(`reasoner.tokenization.encode_prompt_completion`), as Sequent-Prover's SFT and DPO on scratchpad trajectories
need. An SFT (or KTO) completion ends with an assistant turn: `normalize_record` refuses one ending with a user or
tool turn, for JSONL lines and `datasets` rows alike. An assistant message may call tools in OpenAI's form
(`tool_calls` and no content; its content is then null, as TRL passes it to the template). An optional `"tools"`
list (OpenAI tool schemas, TRL's `tools` column, also as one JSON string of the list) is passed to the chat template,
and so is an optional `"chat_template_kwargs"` object (TRL's per-row template variables, e.g. Qwen3's
`enable_thinking`; kept on SFT and DPO records, checked by `reasoner.data.chat_masks.template_kwargs_of`; a {"text"}
record has no template, as in TRL).
Builder configs `sft` and `dpo` pick the schema; every field is stored as a JSON string feature so any chat shape
survives the round trip. Records keep the file's order (no TFDS shuffling, so the rows equal those of the same file
read through `reasoner.data.hf_datasets`) and their line number, so `prepare_sft` / `prepare_dpo` name
"<file>:<line>" in an error about a record (`DecodedSource.where`). Files are read from the `manual_dir` given in
`download_config` (no downloads). Built with `file_format="array_record"` and read with `tfds.data_source` (no
TensorFlow needed).

`build_chat_dataset(jsonl_dir, kind=..., data_dir=...)` builds (once; rebuilt when a file changes)
and returns {split: data source} of plain dicts: {"prompt": [messages], "completion": str | [messages],
"tools": [...] | None} or {"prompt", "chosen", "rejected", "tools"}, each with "chat_template_kwargs" when its record
has them.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
from typing import Any

import numpy as np
import tensorflow_datasets as tfds

SPLITS = ("train", "validation", "test")
FIELDS = {"sft": ("completion",), "dpo": ("chosen", "rejected")}


def _calls_tools(m: dict) -> bool:
    """An assistant message that only calls tools (OpenAI's and TRL's tool-calling format): `tool_calls` and no
    content (absent or null). TRL hands it to the chat template with content None (Arrow fills the key), and so
    do we: templates that render tool calls (Qwen's, Llama 3.1's) test for it."""
    return m.get("role") == "assistant" and m.get("content") is None and isinstance(m.get("tool_calls"), list) \
        and bool(m["tool_calls"])


def messages_of(value, *, where: str, field: str) -> list[dict]:
    """`value` (a record's `field`) as a list of messages (a plain-string prompt: one user message; a plain-string
    completion stays text); a ValueError naming `where` when it is neither."""
    if isinstance(value, str) and field != "messages":  # a conversation is always a list
        return [{"role": "user", "content": value}] if field == "prompt" else value
    if not (isinstance(value, list) and value and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and (isinstance(m.get("content"), str)
                                                                        or _calls_tools(m))
            for m in value)):
        raise ValueError(f"{where}: {field} must be {'a string or ' * (field != 'messages')}a non-empty list of "
                         "{role, content} messages (or assistant messages with tool_calls)")
    return [{**m, "content": m.get("content")} for m in value]


def _split_at_first_assistant(messages: list[dict], *, where: str, field: str) -> tuple[list[dict], list[dict]]:
    cut = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), None)
    if not cut:
        raise ValueError(f"{where}: {field} needs prompt messages followed by an assistant turn")
    return messages[:cut], messages[cut:]


def parse_line(line: str, *, kind: str, where: str) -> dict[str, Any]:
    """One JSONL line -> {"prompt": JSON, <fields>: JSON, "tools": JSON} (sft: and "text", null but in a {text}
    record, whose other fields are null); clear errors name `where`."""
    from reasoner.data.jsonl import parse_object

    record = parse_object(line, where=where, what=f"a {kind} record (prompt and {', '.join(FIELDS[kind])})")
    out = {"chat_template_kwargs": None, **normalize_record(record, kind=kind, where=where)}
    if kind == "sft":  # every TFDS example holds every feature
        out = {"prompt": None, "completion": None, "tools": None, "text": None, **out}
    return {k: json.dumps(v, ensure_ascii=False) for k, v in out.items()}


def normalize_record(record: dict[str, Any], *, kind: str, where: str) -> dict[str, Any]:
    """One record (any accepted shape) -> {"prompt": [messages], <fields>: str | [messages], "tools": list | None,
    "chat_template_kwargs"?: dict (only when the record sets some: records without keep the fields they had)} (or an
    SFT {"text"} record, TRL's language-modelling format: {"text": str}), the plain dicts `DecodedSource` serves;
    clear errors name `where`. Shared by the JSONL builder and `reasoner.data.hf_datasets`, so both sources
    feed the trainers identical examples."""
    record = dict(record)
    if kind == "sft" and "conversations" in record and not {"messages", "prompt"} & set(record):
        # TRL's ShareGPT-style column: {"from", "value"} messages, read as TRL's maybe_convert_to_chatml reads them
        # (the keys renamed to role and content, the roles kept)
        names = {"from": "role", "value": "content"}
        conversation = record.pop("conversations")
        record["messages"] = [{names.get(k, k): v for k, v in m.items()} if isinstance(m, dict) else m
                              for m in conversation] if isinstance(conversation, list) else conversation
    if kind == "sft" and "text" in record and not {"prompt", "messages", "completion"} & set(record):
        text = record["text"]
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{where}: text must be a non-empty string, got {text!r:.80}")
        return {"text": text}
    if kind == "sft" and "messages" in record and "prompt" not in record:
        messages = messages_of(record["messages"], where=where, field="messages")
        record["prompt"], record["completion"] = _split_at_first_assistant(messages, where=where, field="messages")
    if kind == "dpo" and "prompt" not in record and isinstance(record.get("chosen"), list) \
            and isinstance(record.get("rejected"), list):
        # TRL's implicit prompt (`trl.extract_prompt`): the messages both conversations share, but all except the
        # last of them when one conversation extends the other (both completions then start with that message)
        shared, common = 0, min(len(record["chosen"]), len(record["rejected"]))
        while shared < common and record["chosen"][shared] == record["rejected"][shared]:
            shared += 1
        if shared == common and shared:
            shared -= 1
        record["prompt"] = record["chosen"][:shared]
        record["chosen"], record["rejected"] = record["chosen"][shared:], record["rejected"][shared:]
        if not record["prompt"]:
            raise ValueError(f"{where}: chosen and rejected share no prompt messages; give \"prompt\" explicitly")
    missing = [k for k in ("prompt", *FIELDS[kind]) if k not in record]
    if missing:
        raise ValueError(f"{where}: missing {missing}; a {kind} record needs prompt and {list(FIELDS[kind])}"
                         + (" (or TRL's messages, or text)" if kind == "sft" else ""))
    out = {"prompt": messages_of(record["prompt"], where=where, field="prompt")}
    for key in FIELDS[kind]:
        value = messages_of(record[key], where=where, field=key)
        if isinstance(value, list) and not any(m["role"] == "assistant" for m in value):
            raise ValueError(f"{where}: {key} messages hold no assistant turn")
        if kind == "sft" and isinstance(value, list) and value[-1]["role"] != "assistant":
            # the one rule of every SFT (and KTO) input, JSONL lines and `datasets` rows alike: turns after the last
            # assistant turn are never trained, and a trailing user or tool turn is usually a cut conversation
            raise ValueError(f"{where}: the conversation ends with a {value[-1]['role']!r} turn; expected an SFT "
                             "conversation to end with an assistant turn (nothing would learn from what follows)")
        out[key] = value
    out["tools"] = tool_schemas(record.get("tools"), where=where)
    from reasoner.data.chat_masks import template_kwargs_of

    template_kwargs = template_kwargs_of(record.get("chat_template_kwargs"), where=where)
    return {**out, "chat_template_kwargs": template_kwargs} if template_kwargs else out


def tool_schemas(tools, *, where: str) -> list[dict] | None:
    """A record's `tools` -> the list of tool schemas (None: none); a ValueError naming `where` otherwise. TRL's
    `tools` column may hold the list as one JSON string (schemas of mixed shapes fit no one Arrow type) and TRL's
    SFTTrainer parses it: so do JSONL lines and `datasets` rows alike."""
    if isinstance(tools, str):
        try:
            tools = json.loads(tools)
        except json.JSONDecodeError as err:
            raise ValueError(f"{where}: tools must be a list of tool schemas (objects) or that list as one JSON "
                             f"string; got a string that is not valid JSON ({err.msg})") from None
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        raise ValueError(f"{where}: tools must be a list of tool schemas (objects) or that list as one JSON "
                         f"string, got {type(tools).__name__}")
    return tools


class ChatJsonl(tfds.core.GeneratorBasedBuilder):
    """Chat prompt/completion (sft) or prompt/chosen/rejected (dpo) examples from JSONL files."""

    VERSION = tfds.core.Version("1.4.0")  # 1.4: chat_template_kwargs; 1.3: sft {text}; 1.2: line numbers
    RELEASE_NOTES = {"1.4.0": "chat_template_kwargs", "1.3.0": "sft: TRL's {text} records",
                     "1.2.0": "records in file order with their line number",
                     "1.1.0": "completions as text or messages; TRL formats; tools", "1.0.0": "prompt + text"}
    BUILDER_CONFIGS = [
        tfds.core.BuilderConfig(name="sft", description="prompt messages + completion"),
        tfds.core.BuilderConfig(name="dpo", description="prompt messages + chosen + rejected"),
    ]
    MANUAL_DOWNLOAD_INSTRUCTIONS = "Put train.jsonl (and validation.jsonl / test.jsonl) in the manual directory."

    def _info(self) -> tfds.core.DatasetInfo:
        fields = {"prompt": tfds.features.Text(), "tools": tfds.features.Text(), "line": np.int64,
                  "chat_template_kwargs": tfds.features.Text()}
        fields.update({k: tfds.features.Text() for k in FIELDS[self.builder_config.name]})
        if self.builder_config.name == "sft":
            fields["text"] = tfds.features.Text()
        # keys are line numbers: without shuffling TFDS writes the records in that order
        return self.dataset_info_from_configs(features=tfds.features.FeaturesDict(fields), disable_shuffling=True)

    def _split_generators(self, dl_manager):
        root = pathlib.Path(dl_manager.manual_dir)
        present = {s: root / f"{s}.jsonl" for s in SPLITS if (root / f"{s}.jsonl").is_file()}
        if "train" not in present:
            raise FileNotFoundError(f"{root}: expected train.jsonl (and optionally validation.jsonl, test.jsonl)")
        return {split: self._generate_examples(path) for split, path in present.items()}

    def _generate_examples(self, path: pathlib.Path):
        from reasoner.data.jsonl import iter_lines

        kind = self.builder_config.name
        for n, line in iter_lines(path):
            yield n, {**parse_line(line, kind=kind, where=f"{path}:{n}"), "line": n}


def _decode(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


class DecodedSource:
    """Random-access view of a TFDS data source that returns plain Python dicts (messages parsed). `name` (the
    JSONL file) and the records' stored line numbers give `where(index)`, the location an error names."""

    def __init__(self, source, fields: tuple[str, ...], name: str | None = None):
        self._source, self._fields, self.name = source, fields, name
        self._last_line: tuple[int, int | None] = (-1, None)  # (index, line) of the last record read

    def __len__(self) -> int:
        return len(self._source)

    def __getitem__(self, index: int) -> dict[str, Any]:
        raw = self._source[index]
        self._last_line = (index, int(raw["line"]) if "line" in raw else None)
        text = json.loads(_decode(raw["text"])) if "text" in raw else None  # absent in a builder before 1.3
        if text is not None:
            return {"text": text}
        out = {"prompt": json.loads(_decode(raw["prompt"])), "tools": json.loads(_decode(raw["tools"]))}
        out.update({k: json.loads(_decode(raw[k])) for k in self._fields})
        template_kwargs = json.loads(_decode(raw["chat_template_kwargs"])) if "chat_template_kwargs" in raw else None
        return {**out, "chat_template_kwargs": template_kwargs} if template_kwargs else out

    def where(self, index: int) -> str | None:
        """"<file>:<line>" of record `index`; None when the source names no file or its records carry no line."""
        line = self._last_line[1] if self._last_line[0] == index else self._source[index].get("line")
        return f"{self.name}:{int(line)}" if self.name and line is not None else None


def _fingerprint(root: pathlib.Path) -> str:
    h = hashlib.sha256()
    for split in SPLITS:
        path = root / f"{split}.jsonl"
        if path.is_file():
            st = path.stat()
            h.update(f"{split}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:12]


def _has_a_record(path: pathlib.Path) -> bool:
    with open(path, encoding="utf-8-sig", errors="replace") as f:  # a byte order mark alone is no record
        return any(line.strip() for line in f)


def _remove_empty_dirs(root: pathlib.Path) -> None:
    """Removes the empty directories under (and including) `root`, deepest first."""
    if not root.is_dir():
        return
    for path in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        if not any(path.iterdir()):
            path.rmdir()
    if not any(root.iterdir()):
        root.rmdir()


def build_chat_dataset(jsonl_dir, *, kind: str, data_dir) -> dict[str, DecodedSource]:
    """Builds the `kind` ('sft' | 'dpo') dataset from `jsonl_dir` into `data_dir`; returns {split: source}."""
    if kind not in FIELDS:
        raise ValueError(f"kind={kind!r}; expected one of {tuple(FIELDS)}")
    root = pathlib.Path(jsonl_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"chat JSONL directory {root} does not exist")
    if not (root / "train.jsonl").is_file():
        raise FileNotFoundError(f"{root}: expected train.jsonl (and optionally validation.jsonl, test.jsonl)")
    for split in SPLITS:
        path = root / f"{split}.jsonl"
        if path.is_file() and not _has_a_record(path):
            raise ValueError(f"{path} is empty: expected one {kind} record per line"
                             + ("" if split == "train" else " (or remove the file)"))
    # the data_dir is keyed by the files' fingerprint, so edited files are rebuilt rather than served stale
    data_dir = pathlib.Path(data_dir) / f"chat_jsonl_{_fingerprint(root)}"

    def prepared() -> ChatJsonl:
        builder = ChatJsonl(config=kind, data_dir=str(data_dir), file_format="array_record")
        try:
            builder.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=str(root)))
        finally:
            _remove_empty_dirs(data_dir)  # TFDS leaves an empty downloads/ tree behind
        return builder

    # one build per job: process 0 writes the shared data_dir, the other processes then open what it wrote
    # (each makes its builder after the build: one made before would hold the empty dataset's info)
    from reasoner.distributed import primary_first

    builder = primary_first(f"chat_jsonl:{data_dir}:{kind}", prepared)
    return {
        split: DecodedSource(builder.as_data_source(split=split), FIELDS[kind], name=str(root / f"{split}.jsonl"))
        for split in builder.info.splits.keys()
    }
