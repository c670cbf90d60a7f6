"""Loss masks of SFT examples: which tokens of a conversation are trained.

`encode_sft_example(tokenizer, example, where=...)` turns one SFT example into a `PromptCompletion` (ids [T],
completion_mask [T]) by one of three paths:

  plain text    {"text": str}: every token trained (language modelling, TRL's `text` format), EOS appended.
  markers       the chat template wraps assistant output in `{% generation %}...{% endgeneration %}` (TRL's
                `*_training.jinja` templates): the whole conversation is rendered and tokenized once and
                transformers' `apply_chat_template(return_assistant_tokens_mask=True)` marks the tokens inside the
                markers; tokens of the prompt (everything up to its generation prompt) are never trained.
  incremental   no markers (SmolLM2's template, most templates): `reasoner.tokenization.encode_prompt_completion`
                renders the prefix before each completion turn and the prefix after it and trains the difference
                of an assistant turn (its content, end-of-turn marker and the template's separator after it).
                The ids of the whole conversation, rendered and tokenized at once, must then equal the
                concatenated pieces: otherwise the template is not prefix-stable (it rewrites earlier turns, or
                tokens merge across a turn boundary) and the mask would not line up with the sequence the model
                sees, which is an error naming the row.

Every error is one `ValueError` starting with `where` (the file and row), so a bad row is found at once.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from jinja2 import TemplateError

from reasoner.tokenization import (PromptCompletion, chat_ids, check_completion_start, encode, encode_prompt_completion,
                                   render_chat)

GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")


# what encoding a record can raise for bad input: our checks (ValueError) and a chat template's own
# `raise_exception` (jinja2's TemplateError: e.g. Mistral's "roles must alternate"); re-raised naming the row
TEMPLATE_ERRORS = (ValueError, TemplateError)


def has_generation_markers(tokenizer) -> bool:
    """Whether the tokenizer's chat template marks assistant output with `{% generation %}`."""
    template = getattr(tokenizer, "chat_template", None)
    return isinstance(template, str) and bool(GENERATION_TAG.search(template))


def text_document(tokenizer, text: str) -> PromptCompletion:
    """Plain text: its ids with the tokenizer's own special tokens (BOS where it adds one: TRL tokenizes `text`
    with `tokenizer(text)`, as pretraining did) plus EOS (so the model learns to stop), every token trained."""
    if not isinstance(text, str) or not text:
        raise ValueError(f"text: expected a non-empty string, got {text!r:.80}")
    ids = list(tokenizer(text)["input_ids"])
    eos = tokenizer.eos_token_id
    if eos is not None and (not ids or ids[-1] != eos):
        ids.append(int(eos))
    return PromptCompletion(ids=tuple(ids), completion_mask=(1,) * len(ids), prompt_len=0)


def _turns(completion) -> list[dict]:
    return [{"role": "assistant", "content": completion}] if isinstance(completion, str) else list(completion)


def marked_prompt_completion(tokenizer, *, prompt, completion, tools=None) -> PromptCompletion:
    """The marker path: [T] ids of the whole conversation, mask = the template's generation spans after the
    prompt (assistant turns inside `prompt` are context, as on the incremental path)."""
    kwargs = {"tools": list(tools)} if tools else {}
    check_completion_start(_turns(completion))
    messages = [*prompt, *_turns(completion)]
    out = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True,
                                        add_generation_prompt=False, **kwargs)
    ids, mask = list(out["input_ids"]), list(out["assistant_masks"])
    prompt_ids = chat_ids(tokenizer, prompt, add_generation_prompt=True, **kwargs)
    if ids[:len(prompt_ids)] != prompt_ids:
        raise ValueError("chat template is not prefix-stable: the prompt rendered with its generation prompt does "
                         "not tokenize as the start of the whole conversation")
    mask[:len(prompt_ids)] = [0] * len(prompt_ids)
    if not any(mask):
        raise ValueError("the template's {% generation %} markers cover no completion token")
    return PromptCompletion(ids=tuple(ids), completion_mask=tuple(mask), prompt_len=len(prompt_ids))


def _first_difference(a, b) -> int:
    return next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def incremental_prompt_completion(tokenizer, *, prompt, completion, tools=None) -> PromptCompletion:
    """The incremental path (`encode_prompt_completion`) plus the whole-conversation check (module docstring)."""
    pc = encode_prompt_completion(tokenizer, prompt=prompt, completion=completion, tools=tools)
    kwargs = {"tools": list(tools)} if tools else {}
    whole = encode(tokenizer, render_chat(tokenizer, [*prompt, *_turns(completion)], add_generation_prompt=False,
                                          **kwargs))
    if whole != list(pc.ids):
        # the texts are equal (encode_prompt_completion checked each rendering extends the last): tokens merged
        k = _first_difference(whole, pc.ids)
        raise ValueError(
            f"tokens merge across a turn boundary: the whole conversation tokenizes differently from its "
            f"turn-by-turn pieces from token {k} on, the same text split apart (whole {whole[k:k + 4]} = "
            f"{tokenizer.decode(whole[k:k + 4])!r} vs pieces {list(pc.ids[k:k + 4])} = "
            f"{tokenizer.decode(list(pc.ids[k:k + 4]))!r}), so the assistant mask would not line up with the "
            "sequence; expected each turn to start on a token boundary (e.g. a completion without leading whitespace)")
    return pc


def encode_sft_example(tokenizer, example: Mapping[str, Any], *, where: str) -> PromptCompletion:
    """One SFT example ({"text"} or {"prompt", "completion", "tools"?}) -> ids and loss mask; errors name `where`."""
    if example.get("text") is None and not {"prompt", "completion"} <= set(example):
        raise ValueError(f"{where}: expected an SFT example with 'prompt' and 'completion' (or 'text'), got the keys "
                         f"{sorted(example)}")
    try:
        if example.get("text") is not None and example.get("prompt") is None:
            return text_document(tokenizer, example["text"])
        encode_fn = marked_prompt_completion if has_generation_markers(tokenizer) else incremental_prompt_completion
        return encode_fn(tokenizer, prompt=list(example["prompt"]), completion=example["completion"],
                         tools=example.get("tools"))
    except TEMPLATE_ERRORS as err:
        raise ValueError(f"{where}: {err}") from None
