"""GRPO goes on when the judge fails (issue 19, must show): the coverage judge is a local OpenAI-compatible stub that
times out on the requests about one prompt and answers HTTP 500 about another (each retried once, in vain); the
rows judged by a failed call score 0, every failure is counted (`judge/failed`), the rows of the third prompt get
the judge's real score, and the tiny CEDAR run completes its steps with finite losses."""

from __future__ import annotations

import json
import time

import numpy as np

from tests.chat_stub import ChatStub, serve
from tests.trainers.test_grpo import one_device_mesh, tiny, tok_dir  # noqa: F401 - tok_dir is a fixture
from trainers import grpo

TIMEOUT, ERROR, OK = "MARKERTIMEOUT", "MARKERERROR", "MARKEROK"  # outside the policy's vocabulary
JUDGE_TIMEOUT_S, STUB_DELAY_S = 1.0, 3.0  # a 0.3 s timeout also cut good answers on a loaded 2-core CI run
# A valid coverage judgement with 1 of 2 details addressed: r_cov = 0.5 (Eq. 6).
VERDICT = {"observation_details": [{"detail": "a", "addressed": True, "evidence": "x"},
                                   {"detail": "b", "addressed": False, "evidence": ""}], "overall_analysis": "ok"}


class FlakyJudge(ChatStub):
    def reply(self, body):
        user = body["messages"][-1]["content"]
        if TIMEOUT in user:
            time.sleep(STUB_DELAY_S)  # the client gave up after JUDGE_TIMEOUT_S
        if ERROR in user:
            return 500, {"error": {"message": "judge overloaded"}}
        return 200, {"choices": [{"message": {"role": "assistant", "content": json.dumps(VERDICT)}}]}

    def do_POST(self):  # noqa: N802 - a timed-out client closed the socket before the late answer
        try:
            super().do_POST()
        except (BrokenPipeError, ConnectionResetError):
            pass


def recording_reward(specs):
    """The config's composite (+ a small length term so advantages are not all 0), recording every batch."""
    from reasoner.rewards import CompositeReward, WeightedReward, completion_text

    class Recording(CompositeReward):
        seen: list = []

        def __call__(self, completions, *, examples):
            batch = super().__call__(completions, examples=examples)
            self.seen.append(([e["marker"] for e in examples], batch))
            return batch

    base = CompositeReward.from_config(specs)
    length = WeightedReward("len", lambda cs, *, examples: [len(completion_text(c).split()) / 8 for c in cs], 0.1)
    return Recording([*base.rewards, length]), base


def test_judge_timeouts_and_http_500_score_0_are_counted_and_training_goes_on(tok_dir, tmp_path):  # noqa: F811
    examples = [{"prompt": [{"role": "user", "content": f"say something {m}"}], "source": "balanced_copa",
                 "marker": m} for m in (TIMEOUT, ERROR, OK)]
    with serve(FlakyJudge) as url:
        cfg = tiny(tok_dir, "--config.grpo.max_new_tokens=4", "--config.train.num_steps=3",
                   "--config.train.async_checkpoint=False", file="grpo_cedar.py")
        judge = {"endpoint": url, "model": "judge", "timeout_s": JUDGE_TIMEOUT_S, "retries": 1, "backoff_s": 0.0,
                 "max_tokens": 64}
        cfg.rewards = [{"name": "judged_coverage", "as": "coverage", "weight": 1.0, "timeout_s": 60.0,
                        "options": {"judge": judge, "cache": ""}}]
        reward, base = recording_reward([dict(s) for s in cfg.rewards])
        result = grpo.train(cfg, workdir=tmp_path, examples=examples, reward=reward, progress=False,
                            mesh=one_device_mesh())
        reward.close()
        bodies = list(FlakyJudge.bodies)
    counters = base.rewards[0].fn.counters
    markers = [m for ms, _ in reward.seen for m in ms]
    coverage = np.concatenate([b.per_function_BxF[:, b.names.index("coverage")] for _, b in reward.seen])
    failing = sum(m in (TIMEOUT, ERROR) for m in markers)
    assert len(markers) == 3 * 2 * 4 and 0 < failing < len(markers)  # 3 steps x 2 prompts x G 4
    for marker, value in zip(markers, coverage):
        assert value == (0.5 if marker == OK else 0.0), (marker, value)
    assert (counters.requests, counters.failed, counters.valid, counters.invalid) == (
        len(markers), failing, len(markers) - failing, 0)
    # each failed judgement was tried twice (retries=1), each good one once
    asked = [next(m for m in (TIMEOUT, ERROR, OK) if m in b["messages"][-1]["content"]) for b in bodies]
    assert sorted(asked) == sorted(m for m in markers for _ in range(1 if m == OK else 2))
    last = result.history[-1]
    assert (last["judge/failed"], last["judge/requests"]) == (failing, len(markers))
    assert last["reward_failures/coverage"] == 0  # the judge's failures are its own, not the registry's
    assert [h["step"] for h in result.history] == [1, 2, 3]
    assert all(np.isfinite(h["loss"]) and h["skipped"] == 0 for h in result.history)


def test_judge_cache_hits_and_misses_reach_the_metrics():
    """GRPO's metrics carry the judge cache's hits and misses beside the judge's other counts (summed over
    distinct judges; a judge shared by two rewards counts once)."""
    from types import SimpleNamespace

    from reasoner.judges.judge import JudgeCounters
    from trainers.grpo_eval import failure_metrics

    shared = JudgeCounters(requests=5, valid=4, invalid=1, cache_hits=3, cache_misses=2, cancelled=6)
    other = JudgeCounters(requests=2, failed=2, cache_misses=2)
    rewards = [SimpleNamespace(fn=SimpleNamespace(counters=c)) for c in (shared, shared, other)]
    reward = SimpleNamespace(rewards=rewards, counter_dict=lambda: {})
    assert failure_metrics(reward) == {"judge/requests": 7.0, "judge/valid": 4.0, "judge/invalid": 1.0,
                                       "judge/failed": 2.0, "judge/cache_hits": 3.0, "judge/cache_misses": 4.0,
                                       "judge/cancelled": 6.0}
