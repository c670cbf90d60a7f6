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

Tokens that merge where the prompt meets the completion (a completion starting with two spaces or blank lines:
SmolLM2 tokenizes the generation prompt's "\n" and the first " " of "  Hello" as one token) are trained as TRL 1.16's
SFTTrainer trains them, with a warning (once per process): the sequence is the whole conversation tokenized at
once, and the completion starts where it parts from the tokenized prompt (`trl.data_utils.common_prefix_length`),
so the merged token is trained. Both paths do so. A merge at a later turn boundary (after a tool turn) and a
template that renders the prompt's text differently stay errors: there the mask would not say which tokens are the
model's.

Every error is one `ValueError` starting with `where` (the file and row), so a bad row is found at once.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Mapping

from jinja2 import TemplateError

from reasoner.tokenization import (PromptCompletion, chat_ids, check_completion_start, encode, encode_prompt_completion,
                                   render_chat)

GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")
log = logging.getLogger(__name__)
_merge_warned = [False]  # TRL warns once (`logger.warning_once`): a dataset usually has this at every row


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


def marked_prompt_completion(tokenizer, *, prompt, completion, tools=None, where: str = "") -> PromptCompletion:
    """The marker path: [T] ids of the whole conversation, mask = the template's generation spans after the
    prompt (assistant turns inside `prompt` are context, as on the incremental path)."""
    kwargs = {"tools": list(tools)} if tools else {}
    check_completion_start(_turns(completion))
    messages = [*prompt, *_turns(completion)]
    out = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True,
                                        add_generation_prompt=False, **kwargs)
    ids, mask = list(out["input_ids"]), list(out["assistant_masks"])
    prompt_ids = chat_ids(tokenizer, prompt, add_generation_prompt=True, **kwargs)
    prompt_len = _first_difference(ids, prompt_ids)
    if prompt_len < len(prompt_ids):
        prompt_text = render_chat(tokenizer, prompt, add_generation_prompt=True, **kwargs)
        if not render_chat(tokenizer, messages, add_generation_prompt=False, **kwargs).startswith(prompt_text):
            raise ValueError("chat template is not prefix-stable: the prompt rendered with its generation prompt is "
                             "not the start of the whole conversation's text")
        _warn_merge(tokenizer, prompt_ids[prompt_len:], where)
    mask[:prompt_len] = [0] * prompt_len
    if not any(mask):
        raise ValueError("the template's {% generation %} markers cover no completion token")
    return PromptCompletion(ids=tuple(ids), completion_mask=tuple(mask), prompt_len=prompt_len)


def _warn_merge(tokenizer, dropped, where: str) -> None:
    if not _merge_warned[0]:
        _merge_warned[0] = True
        log.warning("%s: tokens merge where the prompt meets the completion: the prompt's last tokens %r are not "
                    "in the whole conversation's ids, so the completion starts where they part and the merged token "
                    "is trained (as TRL's SFTTrainer does); the model is trained on a context that differs from the "
                    "one it sees at inference. To avoid it, start completions without leading whitespace. Shown "
                    "once; it likely applies to other rows.", where or "an example", tokenizer.decode(list(dropped)))


def _first_difference(a, b) -> int:
    return next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _common_suffix(a, b, limit: int) -> int:
    return next((k for k in range(limit) if a[len(a) - 1 - k] != b[len(b) - 1 - k]), limit)


def incremental_prompt_completion(tokenizer, *, prompt, completion, tools=None, where: str = "") -> PromptCompletion:
    """The incremental path (`encode_prompt_completion`) plus the whole-conversation check (module docstring)."""
    pc = encode_prompt_completion(tokenizer, prompt=prompt, completion=completion, tools=tools)
    kwargs = {"tools": list(tools)} if tools else {}
    whole = encode(tokenizer, render_chat(tokenizer, [*prompt, *_turns(completion)], add_generation_prompt=False,
                                          **kwargs))
    if whole == list(pc.ids):
        return pc
    # the texts are equal (encode_prompt_completion checked each rendering extends the last): tokens merged
    k = _first_difference(whole, pc.ids)
    tail = _common_suffix(whole, pc.ids, min(len(whole), len(pc.ids)) - k)
    if k < pc.prompt_len and all(pc.completion_mask[pc.prompt_len:len(pc.ids) - tail]):
        # only where the prompt meets the completion (the pieces part between the prompt's end and trained
        # completion tokens): TRL's rule, the completion starts where the ids part
        _warn_merge(tokenizer, pc.ids[k:pc.prompt_len], where)
        mask = [0] * k + [1] * (len(whole) - tail - k) + list(pc.completion_mask[len(pc.ids) - tail:])
        return PromptCompletion(ids=tuple(whole), completion_mask=tuple(mask), prompt_len=k)
    raise ValueError(
        f"tokens merge across a turn boundary: the whole conversation tokenizes differently from its "
        f"turn-by-turn pieces from token {k} on, the same text split apart (whole {whole[k:k + 4]} = "
        f"{tokenizer.decode(whole[k:k + 4])!r} vs pieces {list(pc.ids[k:k + 4])} = "
        f"{tokenizer.decode(list(pc.ids[k:k + 4]))!r}), so the assistant mask would not line up with the "
        "sequence; expected each turn after the first to start on a token boundary (e.g. without leading "
        "whitespace)")


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
                         tools=example.get("tools"), where=where)
    except TEMPLATE_ERRORS as err:
        raise ValueError(f"{where}: {err}") from None
