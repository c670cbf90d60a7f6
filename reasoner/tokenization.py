"""Tokenizers, chat templates and prompt/completion tokenization.

Tokenizers are `transformers` tokenizers read from a GGUF file (which carries its
vocabulary, merges and chat template) or from an HF checkpoint directory. Reading
a GGUF tokenizer parses the whole file (seconds), so the converted tokenizer is
cached on disk under `$REASONER_CACHE` (default `~/.cache/reasoner`), keyed by the
file's path, size and modification time.

Prompt/completion pairs are tokenized as two pieces and concatenated, so that the
prompt's ids are exactly those the sampler sees at inference time (tokenizing the
joined text could merge tokens across the boundary) and the completion mask is
exact: 1 on completion tokens (the trained ones), 0 on prompt tokens.

Special tokens: a rendered chat (`chat_ids`, and every piece of one) is tokenized without them (`encode`), since
the template writes its own BOS; a plain-string prompt goes through `encode_prompt`, which adds the tokenizer's
(Llama 3's BOS) as `tokenizer(text)` does. `encode_prompt` says why and what the reference tools do.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
from typing import Any, Mapping, Sequence

Message = dict[str, str]

# End-of-turn markers of the chat families we support; whichever exist in a vocabulary stop generation.
_END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<|end_of_text|>", "</s>")


def cache_dir() -> pathlib.Path:
    """Root of the on-disk cache for converted tokenizers and similar derived files."""
    return pathlib.Path(os.environ.get("REASONER_CACHE", pathlib.Path.home() / ".cache" / "reasoner"))


def _resolve_source(model: str | os.PathLike) -> pathlib.Path:
    """A preset name, a GGUF file or an HF directory -> a path on disk."""
    path = pathlib.Path(model)
    if path.exists():
        return path
    if os.sep in str(model) or path.suffix == ".gguf":
        raise FileNotFoundError(f"tokenizer source {model} does not exist")
    from reasoner.models.presets import PRESETS, resolve  # presets know where embedded models live

    if str(model) not in PRESETS:
        raise FileNotFoundError(
            f"tokenizer source {model!r} is neither an existing path nor a preset (known presets: {', '.join(PRESETS)})"
        )
    return pathlib.Path(resolve(str(model)))


_GENERIC_FAST = ("TokenizersBackend", "PreTrainedTokenizerFast")


def _from_directory(path: pathlib.Path):
    """An HF tokenizer directory through the generic fast class when it names that class, else `AutoTokenizer`."""
    config = path / "tokenizer_config.json"
    try:
        tokenizer_class = json.loads(config.read_text(encoding="utf-8")).get("tokenizer_class")
    except (OSError, ValueError, AttributeError):
        tokenizer_class = None
    if tokenizer_class in _GENERIC_FAST and (path / "tokenizer.json").is_file():
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast.from_pretrained(str(path))
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))


def load_tokenizer(model: str | os.PathLike):
    """Loads the tokenizer of a preset name, GGUF file or HF checkpoint directory.

    Returns a `transformers` tokenizer with a chat template and a pad token (the
    end-of-sequence token when the checkpoint names none). A directory whose tokenizer is the generic fast one
    (`tokenizer_class` TokenizersBackend / PreTrainedTokenizerFast, which is what a converted GGUF is saved as) is
    read with that class directly: `AutoTokenizer` imports PyTorch when it is installed (about 10 s a process on
    two cores) for nothing a tokenizer needs. Any other class goes through `AutoTokenizer`.
    """
    source = _resolve_source(model)
    if source.is_file():
        if source.suffix != ".gguf":
            raise ValueError(f"tokenizer source {source}: expected a .gguf file or an HF checkpoint directory")
        stat = source.stat()
        key = hashlib.sha256(f"{source.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:16]
        cached = cache_dir() / "tokenizers" / key
        if (cached / "tokenizer_config.json").is_file():
            tokenizer = _from_directory(cached)
        else:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
            _save_atomically(tokenizer, cached)
    elif source.is_dir():
        if not (source / "tokenizer_config.json").is_file() and not (source / "tokenizer.json").is_file():
            raise FileNotFoundError(f"{source}: no tokenizer.json or tokenizer_config.json in this checkpoint directory")
        tokenizer = _from_directory(source)
    else:
        raise FileNotFoundError(f"tokenizer source {source} does not exist")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _save_atomically(tokenizer, target: pathlib.Path) -> None:
    """Writes the tokenizer beside `target` and renames it in place, so a crash never leaves half a cache."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(f"{target.name}.tmp{os.getpid()}")
    try:
        tokenizer.save_pretrained(str(staging))
        os.replace(staging, target)
    except OSError:
        pass  # another process won the race, or the cache is read-only: loading still worked
    finally:
        if staging.exists():
            import shutil

            shutil.rmtree(staging, ignore_errors=True)


def stop_token_ids(tokenizer) -> tuple[int, ...]:
    """Ids that end an assistant turn: the EOS id plus every known end-of-turn marker in the vocabulary."""
    ids = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    vocab = tokenizer.get_vocab()
    for token in _END_OF_TURN_TOKENS:
        if token in vocab:
            ids.add(int(vocab[token]))
    return tuple(sorted(ids))


def _check_messages(messages: Sequence[Message]) -> None:
    if not messages:
        raise ValueError("messages: expected at least one {'role', 'content'} message, got an empty list")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or "role" not in message or "content" not in message:
            raise ValueError(f"messages[{i}]: expected a dict with 'role' and 'content', got {message!r}")


def render_chat(tokenizer, messages: Sequence[Message], *, add_generation_prompt: bool = True, **template_kwargs: Any) -> str:
    """Renders messages with the tokenizer's chat template (tools etc. pass through `template_kwargs`)."""
    _check_messages(messages)
    return tokenizer.apply_chat_template(
        list(messages), tokenize=False, add_generation_prompt=add_generation_prompt, **template_kwargs
    )


def encode(tokenizer, text: str) -> list[int]:
    """Token ids of `text` with no special tokens added: for rendered chats (the template already wrote them) and
    pieces of a sequence (a turn's suffix, a stop string). A plain-string prompt goes through `encode_prompt`."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def encode_prompt(tokenizer, text: str) -> list[int]:
    """Token ids of a plain-string prompt: the one rule of every caller that turns a user's string into prompt ids
    (GRPO's string prompts `trainers.data.prompt_token_ids`, `Sampler` / `RolloutEngine` str prompts, `reasoner
    generate`'s {"text"} lines).

    Rule: the ids of `tokenizer(text)`, with the special tokens the tokenizer adds (a BOS for Llama 3, Mistral,
    Gemma; none for SmolLM2, Qwen), as the reference tools tokenize a plain prompt: TRL 1.16's GRPOTrainer calls
    `processing_class(text=prompts)` for a non-conversational prompt (`_tokenize_prompts`), transformers'
    text-generation pipeline calls `tokenizer(prefix + prompt_text)` (its `add_special_tokens` left at the
    tokenizer's default, True), and vLLM's /v1/completions tokenizes with `CompletionRequest.add_special_tokens`,
    default True. Without that BOS a BOS-adding model sees a prompt unlike every sequence it was trained on.

    Except: a text that already starts with those leading special tokens (a chat rendered by a template that writes
    `{{ bos_token }}`, as Llama 3's does, or a user who typed the BOS) is tokenized without special tokens, as
    `apply_chat_template(tokenize=True)` does, so the BOS is there once. Here we deliberately differ from TRL's
    plain-text path and vLLM's /v1/completions, which both prepend a second BOS to such a string (vLLM issue #9519;
    TRL issue #3853 for its vLLM path): a doubled BOS is a prompt the model never saw either. A tokenizer that also
    appends an EOS (`add_eos_token`) keeps it on a plain prompt, as `tokenizer(text)` does.

    Chat messages are not plain strings: `chat_ids` renders them and tokenizes with no special tokens, as
    transformers, TRL's conversational path and vLLM's chat route (`add_special_tokens` default False) do.
    """
    if not isinstance(text, str):
        raise TypeError(f"prompt: expected a str, got {type(text).__name__}")
    full, plain = list(tokenizer(text)["input_ids"]), encode(tokenizer, text)
    if full == plain:  # the tokenizer adds nothing (SmolLM2): one path, the ids of before
        return full
    start = next((k for k in range(len(full) - len(plain) + 1) if full[k:k + len(plain)] == plain), 0)
    lead = full[:start]  # what the tokenizer puts before the text: [BOS]
    return plain if lead and plain[:len(lead)] == lead else full


def _byte_level_chars() -> dict[str, int]:
    """The byte-level BPE alphabet (GPT-2's): each of the 256 bytes as one printable character (printable Latin-1
    bytes as themselves, the others shifted past 255 in order), inverted: character -> byte."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, shifted = {}, 0
    for b in range(256):
        if b in keep:
            chars[chr(b)] = b
        else:
            chars[chr(256 + shifted)] = b
            shifted += 1
    return chars


_BYTE_LEVEL = _byte_level_chars()


def token_bytes(tokenizer, token_id: int) -> list[int]:
    """The raw UTF-8 bytes one token stands for (OpenAI's logprob `bytes`): a token may hold part of a character,
    which decoding it alone turns into U+FFFD. Byte-level BPE vocabularies (GPT-2, Llama 3, SmolLM2, Qwen) spell
    bytes as `_BYTE_LEVEL` characters, SentencePiece byte fallback as `<0xHH>`; any other token is its decoded
    text's bytes."""
    piece = tokenizer.convert_ids_to_tokens(int(token_id))
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if isinstance(piece, str):
        if type(getattr(backend, "decoder", None)).__name__ == "ByteLevel" and all(c in _BYTE_LEVEL for c in piece):
            return [_BYTE_LEVEL[c] for c in piece]
        if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            try:
                return [int(piece[3:5], 16)]
            except ValueError:
                pass
    text = tokenizer.decode([int(token_id)], skip_special_tokens=False, clean_up_tokenization_spaces=False)
    return list(text.encode("utf-8"))


def chat_ids(tokenizer, messages: Sequence[Message], *, add_generation_prompt: bool = True, **template_kwargs: Any) -> list[int]:
    """Token ids of a rendered chat, ready for the sampler."""
    return encode(tokenizer, render_chat(tokenizer, messages, add_generation_prompt=add_generation_prompt, **template_kwargs))


@dataclasses.dataclass(frozen=True)
class PromptCompletion:
    """One tokenized training example.

    ids: [T] prompt ids then completion ids.
    completion_mask: [T] 1 where the token belongs to the completion (trained on), else 0.
    prompt_len: number of prompt tokens.
    """

    ids: tuple[int, ...]
    completion_mask: tuple[int, ...]
    prompt_len: int


def check_completion_start(turns: Sequence[Message]) -> None:
    """A completion follows the prompt's generation prompt, so its first turn is the assistant's: one that starts
    with a user or tool turn would not extend the prompt as rendered for generation (it was reported as a template
    that rewrites earlier turns)."""
    role = turns[0].get("role") if turns and isinstance(turns[0], dict) else None
    if role != "assistant":
        raise ValueError(f"completion: starts with a {role!r} turn; expected it to start with an assistant turn (the "
                         "turns before the first assistant turn belong in the prompt)")


def encode_prompt_completion(tokenizer, *, prompt: Sequence[Message], completion: str | Sequence[Message],
                             tools: Sequence[dict] | None = None,
                             template_kwargs: dict[str, Any] | None = None) -> PromptCompletion:
    """Tokenizes a chat prompt and the assistant's completion, with a completion mask.

    `completion` is the assistant's text (one turn) or a list of messages after the prompt: assistant turns
    (trained on) and tool / user turns between them (masked out, as GRPO masks tool responses). Each turn is
    rendered through the chat template (with `tools` where given, as the scratchpad renders it at inference),
    so an assistant turn ends with the template's end-of-turn marker (the model learns to stop) and a tool turn
    carries the next generation prompt, which is not trained either (nor is the generation prompt between two
    assistant turns in a row). The pieces are tokenized separately at the
    turn boundaries, the way the sampler's cache is continued between turns (`reasoner.agents.multiturn`).
    Every rendering must extend the previous one; templates that rewrite earlier turns (e.g. strip reasoning)
    are rejected with an error naming the mismatch.

    `template_kwargs` are the example's own chat template variables (TRL's per-row `chat_template_kwargs`, e.g.
    Qwen3's `enable_thinking`), passed to every rendering; the caller checks their names first
    (`reasoner.data.chat_masks.template_kwargs_of`), as `reasoner.serve.render.render_prompt`'s callers do.
    """
    kwargs = template_call_kwargs(tools, template_kwargs)
    turns = [{"role": "assistant", "content": completion}] if isinstance(completion, str) else list(completion)
    if not turns:
        raise ValueError("completion: expected the assistant's text or a non-empty list of messages")
    if not any(m.get("role") == "assistant" for m in turns):
        raise ValueError("completion: the messages hold no assistant turn, so nothing would be trained")
    check_completion_start(turns)
    prompt_text = render_chat(tokenizer, prompt, add_generation_prompt=True, **kwargs)
    ids, mask = encode(tokenizer, prompt_text), None
    mask = [0] * len(ids)
    prompt_len, done = len(ids), prompt_text
    for j, message in enumerate(turns):
        assistant = message.get("role") == "assistant"
        next_is_assistant = j + 1 < len(turns) and turns[j + 1].get("role") == "assistant"
        if assistant and j and turns[j - 1].get("role") == "assistant":
            # an assistant turn right after another: its header (the generation prompt) is the template's, not the
            # model's output, so it is context (mask 0) as it is after a tool turn
            header = render_chat(tokenizer, [*prompt, *turns[:j]], add_generation_prompt=True, **kwargs)
            if not header.startswith(done):
                raise ValueError(f"chat template renders the earlier turns differently with the generation prompt "
                                 f"before turn {j}; expected the conversation to start with {done[-80:]!r}")
            piece = encode(tokenizer, header[len(done):])
            ids += piece
            mask += [0] * len(piece)
            done = header
        text = render_chat(tokenizer, [*prompt, *turns[:j + 1]], add_generation_prompt=not assistant and
                           next_is_assistant, **kwargs)
        if not text.startswith(done):
            raise ValueError(
                "chat template renders the earlier turns differently once turn "
                f"{j} ({message.get('role')}) is added; expected the conversation to start with {done[-80:]!r}")
        piece = encode(tokenizer, text[len(done):])
        if assistant and not piece:
            raise ValueError(f"completion turn {j} {message.get('content')!r}: renders to no tokens")
        ids += piece
        mask += [1 if assistant else 0] * len(piece)
        done = text
    return PromptCompletion(ids=tuple(ids), completion_mask=tuple(mask), prompt_len=prompt_len)


# Names the template sees from the renderer itself, beside `apply_chat_template`'s own parameters: the messages
# (`conversation` is rendered as `messages`) and the jinja globals transformers defines (a variable of that name
# would shadow the function the template calls).
_RENDERER_VARIABLES = ("messages", "raise_exception", "strftime_now", "dict", "namespace")


def reserved_template_keys(tokenizer) -> frozenset[str]:
    """Names a `chat_template_kwargs` (a client's, or a data row's) may not set: `apply_chat_template`'s parameters
    (tools, add_generation_prompt, tokenize, chat_template, ...: the server or the data encoders set them, or they are
    not template variables), the renderer's own variables (`_RENDERER_VARIABLES`) and the tokenizer's special tokens
    (`bos_token`, ...: transformers passes them as variables and a client's value would replace them silently, so the
    rendered text would hold a marker that is not the tokenizer's). vLLM lets a client override some of these (its
    `add_generation_prompt`, for one); here a clash is refused, naming the key, never applied half-way."""
    import inspect

    params = inspect.signature(type(tokenizer).apply_chat_template).parameters
    own = {name for name, p in params.items() if name != "self" and p.kind is not p.VAR_KEYWORD}
    return frozenset(own | set(_RENDERER_VARIABLES) | set(getattr(tokenizer, "special_tokens_map", {}) or {}))


def template_key_clashes(template_kwargs: Mapping[str, Any] | None, tokenizer) -> list[str]:
    """The keys of `template_kwargs`, in their order, that `reserved_template_keys(tokenizer)` holds: the one check
    of the server's and the data encoders' `chat_template_kwargs`. None or empty: [] (the tokenizer's signature is
    not read, so rows without variables cost nothing)."""
    if not template_kwargs:
        return []
    reserved = reserved_template_keys(tokenizer)
    return [k for k in template_kwargs if k in reserved]


def template_call_kwargs(tools: Sequence[dict] | None, template_kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    """What every rendering of one conversation passes to the chat template beside its messages: the tools (when
    any) and the conversation's template variables (checked first: `template_key_clashes`)."""
    return {**({"tools": list(tools)} if tools else {}), **(template_kwargs or {})}
