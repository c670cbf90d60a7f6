"""`grpo.max_prompt_tokens` (`trainers.grpo_eval`): TRL's left truncation of the chat-templated prompt (the last
max_prompt_tokens ids, what `prompt_ids[:, -max_prompt_length:]` kept), counted per step, or the long examples
dropped at load with a logged count. The reference ids are transformers' own `apply_chat_template`."""

from __future__ import annotations

import numpy as np
import pytest

from tests.trainers.test_grpo import WORDS, one_device_mesh, tiny, tok_dir  # noqa: F401 - tok_dir: a fixture
from trainers import grpo, grpo_eval

SHORT = [{"role": "user", "content": "say something"}]
LONG = [{"role": "user", "content": " ".join(WORDS * 3)}]  # 51 words: far over the limit below
LIMIT = 12


def reference_ids(tokenizer, messages) -> list[int]:
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    return list(ids)


@pytest.fixture(scope="module")
def tokenizer(tok_dir):  # noqa: F811
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tok_dir))


def test_prompts_keep_their_last_tokens(tokenizer):
    examples = [{"prompt": SHORT}, {"prompt": LONG}]
    full = [reference_ids(tokenizer, e["prompt"]) for e in examples]
    assert len(full[0]) <= LIMIT < len(full[1])
    ids, cut = grpo_eval.encode_prompts(examples, tokenizer=tokenizer, max_tokens=LIMIT)
    assert cut == 1 and ids == [full[0], full[1][-LIMIT:]]
    assert tokenizer.decode(ids[1]).rstrip().endswith("assistant")  # the generation prompt survives the cut
    whole, none_cut = grpo_eval.encode_prompts(examples, tokenizer=tokenizer, max_tokens=0)
    assert none_cut == 0 and whole == full


def test_fit_prompts_drops_or_keeps_with_a_logged_count(tok_dir, tokenizer):  # noqa: F811
    examples = [{"prompt": SHORT, "id": 0}, {"prompt": LONG, "id": 1}, {"prompt": SHORT, "id": 2}]
    lines = []
    drop = tiny(tok_dir, f"--config.grpo.max_prompt_tokens={LIMIT}", "--config.grpo.prompt_overflow=drop")
    kept = grpo_eval.fit_prompts(examples, config=drop, tokenizer=tokenizer, log=lines.append)
    longest = len(reference_ids(tokenizer, LONG))
    assert [e["id"] for e in kept] == [0, 2]
    assert lines == [f"[grpo] train: 1 of 3 prompts exceed grpo.max_prompt_tokens={LIMIT} (longest {longest} "
                     "tokens): dropped"]
    truncate = tiny(tok_dir, f"--config.grpo.max_prompt_tokens={LIMIT}")
    assert grpo_eval.fit_prompts(examples, config=truncate, tokenizer=tokenizer, log=lines.append) == examples
    assert lines[-1].endswith("truncated from the left at each step")
    with pytest.raises(ValueError, match="leaves no train prompt"):
        grpo_eval.fit_prompts([{"prompt": LONG}], config=drop, tokenizer=tokenizer, log=lines.append)
    for override, message in (("--config.grpo.max_prompt_tokens=-1", "grpo.max_prompt_tokens=-1: expected an int"),
                              ("--config.grpo.prompt_overflow=right", "grpo.prompt_overflow='right': expected one")):
        with pytest.raises(ValueError) as err:
            grpo.check_config(tiny(tok_dir, override))
        assert str(err.value).startswith(message) and "\n" not in str(err.value)


class SpySampler:
    """The run's sampler, recording the prompt ids each rollout starts from."""

    def __init__(self, inner):
        object.__setattr__(self, "inner", inner)
        object.__setattr__(self, "started", [])

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __setattr__(self, name, value):  # sync_sampler points the inner sampler at the new weights
        setattr(self.inner, name, value)

    def start(self, prompts, *args, **kwargs):
        self.started.append([list(p) for p in prompts])
        return self.inner.start(prompts, *args, **kwargs)

    def generate(self, prompts, *args, **kwargs):  # single-turn rollouts
        self.started.append([list(p) for p in prompts])
        return self.inner.generate(prompts, *args, **kwargs)


def test_a_generation_step_rolls_out_from_the_truncated_prompt(tok_dir, tokenizer):  # noqa: F811
    from reasoner.rewards import CompositeReward, WeightedReward, completion_text

    cfg = tiny(tok_dir, "--config.grpo.max_new_tokens=4", f"--config.grpo.max_prompt_tokens={LIMIT}")
    steps = grpo.build_grpo(cfg, mesh=one_device_mesh())
    sampler = SpySampler(grpo.sampler_for(steps.run))
    reward = CompositeReward([WeightedReward("len", lambda cs, *, examples: [
        float(len(completion_text(c).split())) for c in cs])])
    examples = [{"prompt": LONG}, {"prompt": SHORT}]
    _, metrics = grpo.generation_step(steps, sampler, steps.run.state, examples=examples, reward=reward, tool=None,
                                      seed=0)
    reward.close()
    want = [reference_ids(tokenizer, LONG)[-LIMIT:], reference_ids(tokenizer, SHORT)]
    assert sampler.started == [want]
    assert metrics["prompts/truncated"] == 1.0 and np.isfinite(metrics["loss"]) and metrics["skipped"] == 0
