"""Loss masks of SFT examples: which tokens of a conversation are trained.

`encode_sft_example(tokenizer, example, where=...)` turns one SFT example into a `PromptCompletion` (ids [T],
completion_mask [T]) by one of three paths:

  plain text    {"text": str}: every token trained (language modelling, TRL's `text` format), EOS appended.
  markers       the chat template wraps assistant output in `{% generation %}...{% endgeneration %}` (TRL's
                `*_training.jinja` templates): the whole conversation is rendered and tokenized once and
                transformers' `apply_chat_template(return_assistant_tokens_mask=True)` marks the tokens inside the
                markers; tokens of the prompt (everything up to its generation prompt) are never trained.
  incremental   no markers (SmolLM2's template, most templates). One assistant turn: TRL's rule (below). Several
                turns: `reasoner.tokenization.encode_prompt_completion` renders the prefix before each completion
                turn and the prefix after it and trains the difference of an assistant turn (its content,
                end-of-turn marker and the template's separator after it); the ids of the whole conversation,
                rendered and tokenized at once, must then equal the concatenated pieces, except where the prompt
                meets the completion (TRL's rule again): otherwise the template is not prefix-stable (it rewrites
                earlier turns, or tokens merge at a later turn boundary) and the mask would not line up with the
                sequence the model sees, which is an error naming the row.

TRL's rule (1.16's SFTTrainer `tokenize_fn` for prompt-completion rows, and its DPOTrainer / KTOTrainer, which
`reasoner.data.preference_tokens` follows with `prompt_length` below): the sequence is the whole conversation
tokenized at once, and the completion starts where it parts from the prompt tokenized alone with its generation
prompt (`trl.data_utils.common_prefix_length`); every id from there on is trained (with markers: those the markers
mark). The prompt's ids past that point are left out, with a warning (once per process, naming the row) and a
count (`DataStats.prompt_cut`). Two cases reach it: tokens that merge across the boundary (a completion starting
with two spaces or blank lines: SmolLM2 tokenizes the generation prompt's "\n" and the first " " of "  Hello" as
one token, which is then trained) and a template that renders the prompt alone differently from the prompt inside
the conversation (one that writes an empty thought block only after the generation prompt, Gemma-style, or
numbers the turns). We refused the second; SFT, DPO and KTO now all train such a row as TRL does, so one dataset
gives the same sequences to every trainer and to TRL. A completion of several turns whose template renders the
prompt differently stays an error: no mask would say which of its tokens are the model's.

`template_kwargs` (TRL's per-row `chat_template_kwargs`, e.g. Qwen3's `enable_thinking`) reach every rendering of a
row. `template_kwargs_of` is the one check of them (readers and encoders alike): an object of template variables,
none of them a name the template call sets itself.

Every error is one `ValueError` starting with `where` (the file and row), so a bad row is found at once.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Mapping, Sequence

from jinja2 import TemplateError

from reasoner.tokenization import (PromptCompletion, chat_ids, check_completion_start, encode_prompt_completion,
                                   template_call_kwargs, template_key_clashes)

GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")
log = logging.getLogger(__name__)
_cut_warned = [False]  # TRL warns once (`logger.warning_once`): a dataset usually has this at every row


# what encoding a record can raise for bad input: our checks (ValueError) and a chat template's own
# `raise_exception` (jinja2's TemplateError: e.g. Mistral's "roles must alternate"); re-raised naming the row
TEMPLATE_ERRORS = (ValueError, TemplateError)


def template_kwargs_of(value, *, where: str, tokenizer=None) -> dict[str, Any]:
    """A row's `chat_template_kwargs` (TRL's column: a dict of template variables; None or absent: none) -> the dict;
    a ValueError naming `where` for anything else or, given the tokenizer, for a key that is not a template variable
    of its own (`reasoner.tokenization.template_key_clashes`: `apply_chat_template`'s parameters such as
    `add_generation_prompt` or `tools`, the renderer's names, the special tokens), refused as our server refuses it
    (TRL's `{"tools": tools, **chat_template_kwargs}` lets it replace the tools column, or fails on a duplicate
    argument). The readers check the shape (no tokenizer yet), the encoders the names."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise ValueError(f"{where}: chat_template_kwargs must be an object of template variables (e.g. "
                         f'{{"enable_thinking": false}}), got {type(value).__name__}')
    if tokenizer is not None:
        clash = sorted(template_key_clashes(value, tokenizer))
        if clash:
            raise ValueError(f"{where}: chat_template_kwargs sets {clash}, which the chat template call sets itself "
                             "(or which are not template variables); expected template variables only (tools go in "
                             "the row's tools)")
    return dict(value)


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading ids `a` and `b` share (`trl.data_utils.common_prefix_length`'s contract)."""
    n = min(len(a), len(b))
    return next((k for k in range(n) if a[k] != b[k]), n)


def prompt_length(tokenizer, prompt_ids: Sequence[int], joined: Sequence[Sequence[int]], *, where: str,
                  stats=None) -> int:
    """TRL's prompt length: the longest common prefix of `prompt_ids` (the prompt tokenized alone) and every joined
    sequence (prompt + a completion tokenized at once). Shorter than `prompt_ids` (a cut prompt, module docstring):
    warned once per process naming `where`, and counted in `stats.prompt_cut` when `stats` (a `DataStats`) is
    given."""
    p = min(common_prefix_length(prompt_ids, ids) for ids in joined)
    if p < len(prompt_ids):
        if not _cut_warned[0]:
            _cut_warned[0] = True
            log.warning("%s: the tokenized prompt is not a prefix of the tokenized prompt + completion (tokens merge "
                        "across the boundary, or the chat template renders the prompt alone differently); as TRL "
                        "does, the completion starts where they part and this end of the prompt is left out of the "
                        "sequence: %r. The model is trained on a context that differs from the one it sees at "
                        "inference; end the prompt on a token boundary (no leading whitespace in completions) and "
                        "use a template that renders the prompt the same way alone to avoid it. Shown once; "
                        "DataStats.prompt_cut counts the examples.", where or "an example",
                        tokenizer.decode(list(prompt_ids[p:])))
        if stats is not None:
            stats.prompt_cut += 1
    return p


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


def marked_prompt_completion(tokenizer, *, prompt, completion, tools=None, template_kwargs=None, where: str = "",
                             stats=None) -> PromptCompletion:
    """The marker path: [T] ids of the whole conversation, mask = the template's generation spans from TRL's prompt
    length on (assistant turns inside `prompt` are context, as on the incremental path). `template_kwargs`: the
    row's template variables, checked by the caller (`template_kwargs_of`)."""
    kwargs = template_call_kwargs(tools, template_kwargs)
    check_completion_start(_turns(completion))
    messages = [*prompt, *_turns(completion)]
    out = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True,
                                        add_generation_prompt=False, **kwargs)
    ids, mask = list(out["input_ids"]), list(out["assistant_masks"])
    prompt_ids = chat_ids(tokenizer, prompt, add_generation_prompt=True, **kwargs)
    prompt_len = prompt_length(tokenizer, prompt_ids, [ids], where=where, stats=stats)
    mask[:prompt_len] = [0] * prompt_len
    if not any(mask):
        raise ValueError("the template's {% generation %} markers cover no completion token")
    return PromptCompletion(ids=tuple(ids), completion_mask=tuple(mask), prompt_len=prompt_len)


def _common_suffix(a, b, limit: int) -> int:
    return next((k for k in range(limit) if a[len(a) - 1 - k] != b[len(b) - 1 - k]), limit)


def incremental_prompt_completion(tokenizer, *, prompt, completion, tools=None, template_kwargs=None,
                                  where: str = "", stats=None) -> PromptCompletion:
    """The incremental path (module docstring): one assistant turn by TRL's rule, several by
    `encode_prompt_completion` plus the whole-conversation check. `template_kwargs`: the row's template variables,
    checked by the caller (`template_kwargs_of`); `stats` counts a cut prompt."""
    kwargs, turns = template_call_kwargs(tools, template_kwargs), _turns(completion)
    if len(turns) == 1:
        check_completion_start(turns)
        prompt_ids = chat_ids(tokenizer, prompt, add_generation_prompt=True, **kwargs)
        whole = chat_ids(tokenizer, [*prompt, *turns], add_generation_prompt=False, **kwargs)
        k = prompt_length(tokenizer, prompt_ids, [whole], where=where, stats=stats)
        if k == len(whole):
            raise ValueError(f"completion {turns[0].get('content')!r}: the conversation's ids end where the prompt's "
                             "do, so nothing would be trained; expected a completion that renders to tokens")
        return PromptCompletion(ids=tuple(whole), completion_mask=(0,) * k + (1,) * (len(whole) - k), prompt_len=k)
    pc = encode_prompt_completion(tokenizer, prompt=prompt, completion=completion, tools=tools,
                                  template_kwargs=template_kwargs)
    whole = chat_ids(tokenizer, [*prompt, *turns], add_generation_prompt=False, **kwargs)
    if whole == list(pc.ids):
        return pc
    # the texts are equal (encode_prompt_completion checked each rendering extends the last): tokens merged
    k = common_prefix_length(whole, pc.ids)
    tail = _common_suffix(whole, pc.ids, min(len(whole), len(pc.ids)) - k)
    if k < pc.prompt_len and all(pc.completion_mask[pc.prompt_len:len(pc.ids) - tail]):
        # only where the prompt meets the completion (the pieces part between the prompt's end and trained
        # completion tokens): TRL's rule, the completion starts where the ids part
        prompt_length(tokenizer, pc.ids[:pc.prompt_len], [whole], where=where, stats=stats)
        mask = [0] * k + [1] * (len(whole) - tail - k) + list(pc.completion_mask[len(pc.ids) - tail:])
        return PromptCompletion(ids=tuple(whole), completion_mask=tuple(mask), prompt_len=k)
    raise ValueError(
        f"tokens merge across a turn boundary: the whole conversation tokenizes differently from its "
        f"turn-by-turn pieces from token {k} on, the same text split apart (whole {whole[k:k + 4]} = "
        f"{tokenizer.decode(whole[k:k + 4])!r} vs pieces {list(pc.ids[k:k + 4])} = "
        f"{tokenizer.decode(list(pc.ids[k:k + 4]))!r}), so the assistant mask would not line up with the "
        "sequence; expected each turn after the first to start on a token boundary (e.g. without leading "
        "whitespace)")


def encode_sft_example(tokenizer, example: Mapping[str, Any], *, where: str, stats=None) -> PromptCompletion:
    """One SFT example ({"text"} or {"prompt", "completion", "tools"?, "chat_template_kwargs"?}) -> ids and loss
    mask; errors name `where`; `stats` (a `DataStats`) counts a cut prompt (module docstring)."""
    if example.get("text") is None and not {"prompt", "completion"} <= set(example):
        raise ValueError(f"{where}: expected an SFT example with 'prompt' and 'completion' (or 'text'), got the keys "
                         f"{sorted(example)}")
    if example.get("text") is not None and example.get("prompt") is None:
        try:  # TRL ignores chat_template_kwargs for plain text: no template renders it
            return text_document(tokenizer, example["text"])
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None
    template_kwargs = template_kwargs_of(example.get("chat_template_kwargs"), where=where, tokenizer=tokenizer)
    encode_fn = marked_prompt_completion if has_generation_markers(tokenizer) else incremental_prompt_completion
    try:
        return encode_fn(tokenizer, prompt=list(example["prompt"]), completion=example["completion"],
                         tools=example.get("tools"), template_kwargs=template_kwargs, where=where, stats=stats)
    except TEMPLATE_ERRORS as err:
        raise ValueError(f"{where}: {err}") from None
