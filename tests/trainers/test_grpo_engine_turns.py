"""Multi-turn GRPO rollouts on the paged RolloutEngine (`grpo.sampler_for` "auto" on one device) equal the static
Sampler's: the same completion tokens, tool masks, truncation and (within the forward's float32 bound) old
log-probs, turn after turn. A random model writes no tool calls, so the tool here answers every turn of most rows
with a fixed text (longer than a KV block) and ends one row of each prompt after its first turn."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from tests.tolerances import logprob_atol
from tests.trainers.test_grpo import G, one_device_mesh, tiny, tok_dir  # noqa: F401 - tok_dir is a fixture
from trainers import grpo


class AnsweringTool:
    """`multiturn.Tool`: a turn ends at a colour (or at the token budget); row b gets a response of 18 + 3 * (b % 3)
    words after each turn (longer than a 16-position block), except rows with b % G == 2, which end after their
    first turn; the trajectories are the turns' texts."""

    stop: tuple[str, ...] = ("red", "blue", "green")

    def begin(self, examples) -> None:
        self.turns: list[list[str]] = [[] for _ in examples]

    def turn(self, completions, *, want_next: bool) -> dict[int, str]:
        out = {}
        for b, c in completions.items():
            self.turns[b].append(c.text)
            if want_next and b % G != 2:
                out[b] = " " + " ".join(["red blue green one two three"] * 3 + ["dog"] * (3 * (b % 3)))
        return out

    def trajectories(self) -> list:
        return [list(t) for t in self.turns]


def test_multi_turn_rollout_on_the_engine_equals_the_static_sampler(tok_dir):  # noqa: F811
    from reasoner.sampling import Sampler, SamplingParams
    from reasoner.sampling.rollout_engine import RolloutEngine
    from reasoner.tokenization import encode

    cfg = tiny(tok_dir, "--config.grpo.max_new_tokens=12", "--config.grpo.max_completion_tokens=70",
               "--config.grpo.max_turns=3")
    steps = grpo.build_grpo(cfg, mesh=one_device_mesh())
    engine = grpo.sampler_for(steps.run)
    assert isinstance(engine, RolloutEngine)
    tok = steps.run.tokenizer
    prompts = [encode(tok, "say something"), encode(tok, "one two three four apple")]
    sampling = SamplingParams(max_new_tokens=12, temperature=1.0, n=G, seed=3, eos_ids=())
    got = [grpo.rollout(s, prompt_ids=prompts, examples=[{}, {}], sampling=sampling, budget=70,
                        tool=AnsweringTool(), max_turns=3, tool_reserve=16)
           for s in (engine, Sampler(steps.run.model(), tok))]
    paged, static = got
    assert [x.tolist() for x in paged.completion_ids] == [x.tolist() for x in static.completion_ids]
    assert [x.tolist() for x in paged.tool_mask] == [x.tolist() for x in static.tool_mask]
    assert paged.truncated.tolist() == static.truncated.tolist()
    assert paged.completions == static.completions
    # what ran: rows answered twice (3 turns), rows ended after one turn, rows whose last response overran the budget
    spans = [int(np.sum(np.diff(np.concatenate([[1], m])) == -1)) for m in static.tool_mask]
    assert {0, 1, 2} <= set(spans) and static.truncated.any() and not static.truncated.all()
    assert engine.stats["extend_calls"] == 2 and not engine.sched.rows  # the session was closed after the rollout
    model = steps.run.model()
    longest = max((list(p) + list(c) for p, c in zip(static.prompt_ids, static.completion_ids)), key=len)
    z = model(jnp.asarray([longest]), positions_BxT=jnp.arange(len(longest))[None])[0]
    atol = logprob_atol(z, steps.run.model_cfg, seq_len=len(longest))
    for a, b in zip(paged.old_logps, static.old_logps):
        np.testing.assert_allclose(a, b, rtol=0, atol=atol)
