"""Prompt and completion ids of preference data (DPO pairs, KTO examples), tokenized as TRL 1.16 tokenizes them.

TRL's rule (`DPOTrainer._prepare_dataset` / `KTOTrainer._prepare_dataset`, their `tokenize_fn`): tokenize the prompt
alone and prompt + completion joined, for every completion of the example (DPO: chosen and rejected; KTO: the one
completion), and take as the prompt the longest common prefix of the prompt's ids with every joined sequence
(`trl.data_utils.common_prefix_length`, the minimum over the completions); each completion's ids are the rest of its
joined sequence. The completion therefore starts where the ids part, which is not always after the prompt's last
token: " Paris" after "The capital of France is", or "  Hello" after SmolLM2's generation prompt "...assistant\\n",
merges with the prompt's end, and a template may render the prompt alone differently (Gemma 4's empty thought block).
The prompt's divergent tail is then left out of the sequence, as TRL leaves it out. We tokenized prompt and
completion apart and concatenated them, so such a row trained on other tokens than TRL's.

  plain text     prompt, chosen, rejected (completion) all strings: each completion gets the tokenizer's EOS text
                 appended unless it already ends with it (TRL's `add_eos`), and every string is tokenized with the
                 tokenizer's own special tokens (`tokenizer(text)`; through `reasoner.tokenization.encode_prompt`,
                 whose one deliberate difference is a text that already starts with the BOS, which keeps one BOS).
                 `tools` and `chat_template_kwargs` do not apply to plain text (TRL ignores them too).
  conversational the prompt a list of messages; a completion a list of messages or the assistant's text (our readers'
                 form of one assistant turn: TRL takes it as [{"role": "assistant", "content": text}], whose ids are
                 the same). The prompt is rendered with `add_generation_prompt=True`, the joined conversation
                 without, both through `apply_chat_template` with the row's `tools` (a list, or TRL's JSON string of
                 it) and `chat_template_kwargs` (a dict of template variables, e.g. Qwen3's `enable_thinking`).

Our readers (`chat_jsonl.normalize_record`, hence JSONL files, `datasets` rows and in-memory rows alike) read a
plain-string prompt as one user message, their documented choice (`reasoner.data.hf_datasets`), so the rows they
give take the conversational path; rows handed to `prepare_dpo` / `prepare_kto` as plain text take TRL's plain one.

Where the prompt's ids are not a prefix of a joined sequence, TRL logs one warning (`warning_once`) with the cut-off
tail; we warn once per process with the same information and the row, and count every such example in
`DataStats.prompt_cut` (`reasoner.data.chat_masks.prompt_length`, the one function of this rule, which our SFT path
follows too, as TRL's SFTTrainer does).

The loss mask is TRL's completion mask (1 on every completion id), except where a completion holds several turns: a
tool (or user) turn after an assistant turn, and the generation prompt before the next assistant turn, are context,
not the model's output, so they are masked as our SFT path masks them (`reasoner.data.chat_masks.
incremental_prompt_completion`, which also refuses, naming the row, a merge at such a later turn boundary or a
template that rewrites earlier turns: there no mask says which tokens are the model's). TRL trains them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

from reasoner.data.chat_masks import TEMPLATE_ERRORS, incremental_prompt_completion, prompt_length, template_kwargs_of
from reasoner.tokenization import PromptCompletion, chat_ids, check_completion_start, encode_prompt


@dataclasses.dataclass(frozen=True)
class PreferenceTokens:
    """One example's ids in TRL's split.

    prompt_ids: the prompt (TRL's `prompt_ids`): the common prefix of the prompt's ids and every joined sequence.
    completion_ids: per completion, the rest of its joined sequence (TRL's `chosen_ids` / `rejected_ids` /
      `completion_ids`).
    completion_masks: per completion, 1 where the token is trained (see the module docstring), aligned with its ids.
    cut: the prompt's own ids left out of the sequence (empty when the prompt is a prefix of every joined sequence).
    """

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[tuple[int, ...], ...]
    completion_masks: tuple[tuple[int, ...], ...]
    cut: tuple[int, ...]

    def sequence(self, k: int) -> PromptCompletion:
        """Completion `k` as one sequence: prompt ids then its ids, the mask 0 on the prompt."""
        return PromptCompletion(ids=self.prompt_ids + self.completion_ids[k],
                                completion_mask=(0,) * len(self.prompt_ids) + self.completion_masks[k],
                                prompt_len=len(self.prompt_ids))


def _plain(tokenizer, prompt: str, completions: Sequence, *, keys: Sequence[str], where: str):
    bad = [k for k, c in zip(keys, completions) if not isinstance(c, str)]
    if bad:
        raise ValueError(f"{where}: the prompt is plain text but {bad} {'is' if len(bad) == 1 else 'are'} not; "
                         "expected all strings (plain text) or a list of messages as the prompt (conversational)")
    eos = tokenizer.eos_token
    texts = [c if eos is None or c.endswith(eos) else c + eos for c in completions]
    joined = [encode_prompt(tokenizer, prompt + text) for text in texts]
    return encode_prompt(tokenizer, prompt), joined, [None] * len(joined)


def _conversational(tokenizer, prompt, completions, *, keys, tools, template_kwargs, where):
    """(prompt ids, joined ids per completion, per completion None or the SFT mask of a multi-turn one)."""
    kwargs = {"tools": tools, **template_kwargs}
    prompt_ids, joined, masks = None, [], []
    for key, completion in zip(keys, completions):
        try:  # an error names the row and the side: `where (chosen): ...`
            turns = [{"role": "assistant", "content": completion}] if isinstance(completion, str) else completion
            if not isinstance(turns, list) or not turns:
                raise ValueError("expected the assistant's text or a non-empty list of messages")
            check_completion_start(turns)
            if prompt_ids is None:
                prompt_ids = chat_ids(tokenizer, prompt, add_generation_prompt=True, **kwargs)
            pc = None
            if len(turns) > 1:  # its ids are the whole conversation tokenized at once, as a single turn's below
                pc = incremental_prompt_completion(tokenizer, prompt=prompt, completion=turns, tools=tools,
                                                   template_kwargs=template_kwargs, where=where)
                ids = list(pc.ids)
            else:
                ids = chat_ids(tokenizer, [*prompt, *turns], add_generation_prompt=False, **kwargs)
        except TEMPLATE_ERRORS as err:
            raise ValueError(f"{where} ({key}): {err}" if len(keys) > 1 else f"{where}: {err}") from None
        joined.append(ids)
        masks.append(pc)
    return prompt_ids, joined, masks


def tokenize_preference(tokenizer, example: Mapping[str, Any], *, keys: Sequence[str], where: str,
                        stats=None) -> PreferenceTokens:
    """One example's prompt and completions (`example[k]` for k in `keys`) in TRL 1.16's split (module docstring).

    `stats` (a `DataStats`), when given, counts the example in `prompt_cut` when the prompt loses a tail. Errors are
    one ValueError starting with `where` (and the side, for several completions).
    """
    from reasoner.data.chat_jsonl import tool_schemas

    missing = [k for k in ("prompt", *keys) if example.get(k) is None]
    if missing:
        raise ValueError(f"{where}: missing {missing}; expected prompt and {list(keys)}")
    prompt, completions = example["prompt"], [example[k] for k in keys]
    if isinstance(prompt, str):
        prompt_ids, joined, multi = _plain(tokenizer, prompt, completions, keys=keys, where=where)
    elif isinstance(prompt, list):
        tools = tool_schemas(example.get("tools"), where=where)
        template_kwargs = template_kwargs_of(example.get("chat_template_kwargs"), where=where, tokenizer=tokenizer)
        prompt_ids, joined, multi = _conversational(tokenizer, list(prompt), completions, keys=keys, tools=tools,
                                                    template_kwargs=template_kwargs, where=where)
    else:
        raise ValueError(f"{where}: prompt must be a string (plain text) or a list of messages, got "
                         f"{type(prompt).__name__}")
    p = prompt_length(tokenizer, prompt_ids, joined, where=where, stats=stats)
    masks = []
    for ids, pc in zip(joined, multi):
        if pc is None:
            masks.append((1,) * (len(ids) - p))
        else:  # the SFT mask, and TRL's 1 on the prompt tokens this side shares but another side does not
            masks.append((1,) * (pc.prompt_len - p) + tuple(pc.completion_mask[pc.prompt_len:]))
    cut = tuple(prompt_ids[p:])
    return PreferenceTokens(prompt_ids=tuple(prompt_ids[:p]), completion_ids=tuple(tuple(ids[p:]) for ids in joined),
                            completion_masks=tuple(masks), cut=cut)
