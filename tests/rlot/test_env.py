"""The batched RL-of-Thoughts environment: one LLM call per block stage for all episodes, N = 16 equal to N = 1."""

import hashlib

import numpy as np
import pytest

from reasoner.agents.rlot import prompts as P
from reasoner.agents.rlot.env import DEBATE, DECOMPOSE, REASON, REFINE, TERMINATE, ThoughtEnv
from reasoner.agents.rlot.llm import CountingLM, Generation
from reasoner.agents.rlot.prm import VerifierPRM, arithmetic_check
from reasoner.tasks.reasoning import Problem


def _h(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


class RuleLM:
    """A deterministic stand-in LLM: each reply is a function of its prompt alone (like greedy decoding)."""

    calls = 0

    def generate(self, prompts, *, max_new_tokens=None):
        self.calls += 1
        out = []
        for p in prompts:
            h = _h(p)
            if p.endswith(P.EVALUATE):
                text = "\n".join(f"{k} score=[{(h >> j) % 4}] reason=[r]" for j, k in enumerate(P.SCORE_KEYS))
                text = "I cannot judge this." if h % 7 == 0 else text  # some replies are unparseable
            elif p.endswith(P.CHECK_FINISHED):
                text = "Yes." if h % 4 == 0 else "No."
            elif p.endswith(P.DECOMPOSE):
                text = "".join(f"### Subtask{k + 1}: part {k} of {h % 97}\n" for k in range(1 + h % 3))
            elif p.endswith(P.DEBATE):
                text = "### Plan1: add\n### Plan2: multiply\n### Plan3: guess"
            elif "most promising plan" in p:
                text = f"The most promising plan is Plan{1 + h % 3}: because"
            elif "final answer to the problem. End" in p:
                text = f"The answer is {h % 3}."
            else:
                text = f"{h % 10} + 1 = {h % 10 + 1 + (h % 2)}"  # half of the steps are wrong arithmetic
            out.append(Generation(text=text, prompt_tokens=len(p.split()), completion_tokens=len(text.split())))
        return out


PROBLEMS = [Problem(id=f"p{i}", task="toy", question=f"What is {i} mod 3?", gold=str(i % 3), kind="number")
            for i in range(16)]
# four steps of actions per episode: every block appears, Refine first in some rows (it must run Reason)
SCRIPT = np.array([[(i + s) % 5 if s else (3 if i % 4 == 0 else i % 5) for s in range(4)] for i in range(16)]) 
SCRIPT[:, -1] = TERMINATE


def _run(lm, problems, script, *, prm=None, max_depth=3):
    env = ThoughtEnv(lm, problems, prm=prm, max_depth=max_depth, max_width=3)
    env.reset_problems(problems)
    trace = []
    for s in range(script.shape[1]):
        before = lm.calls
        obs, reward, done = env.step(script[:, s])
        trace.append((obs, reward, done, lm.calls - before))
    return env, trace


def test_sixteen_episodes_make_one_call_per_block_stage():
    lm = CountingLM(RuleLM())
    env = ThoughtEnv(lm, PROBLEMS, prm=VerifierPRM(arithmetic_check), max_depth=3, max_width=3)
    env.reset_problems(PROBLEMS)
    assert lm.batch_sizes == [16] and env.stage_log == [("evaluate", list(range(16)))]
    for s in range(SCRIPT.shape[1]):
        active = [i for i, e in enumerate(env.episodes) if not e.done]
        n_blocks = {i: len(env.episodes[i].blocks) for i in active}
        calls_before, log_before = lm.calls, len(env.stage_log)
        env.step(SCRIPT[:, s])
        stages = env.stage_log[log_before:]
        names = [name for name, _ in stages]
        assert lm.calls - calls_before == len(stages)  # every LLM call is one logged stage ...
        assert len(set(names)) == len(names)  # ... and no stage is called twice in a step
        chosen = {i: env.episodes[i].blocks[n_blocks[i]] for i in active}  # after the Refine-first rule
        rows = dict(stages)
        for block, first_stage in ((REASON, "reason"), (DECOMPOSE, "decompose/list"), (DEBATE, "debate/plans"),
                                   (REFINE, "refine")):
            wanted = [i for i in active if chosen[i] == block]
            assert rows.get(first_stage, []) == wanted, (s, first_stage)
        for later in ("decompose/summary",):
            assert rows.get(later, []) == rows.get("decompose/list", [])
        for later in ("debate/aggregate", "debate/step"):
            assert rows.get(later, []) == rows.get("debate/plans", [])
        ended = [i for i in active if env.episodes[i].done]
        assert rows.get("terminate", []) == ended
        assert rows.get("evaluate", []) == [i for i in active if not env.episodes[i].done]
        subtask_stages = sorted(n for n in names if n.startswith("decompose/subtask"))
        assert subtask_stages == [f"decompose/subtask{k + 1}" for k in range(len(subtask_stages))]
    assert all(e.done for e in env.episodes)
    assert all(e.blocks[0] != REFINE for e in env.episodes)  # Refine first ran Reason
    assert sum(SCRIPT[:, 0] == REFINE) == 6 and sum(e.blocks[0] == REASON for e in env.episodes) == 6 + 3
    assert 0 < env.unparsed_states < env.evaluated_states
    assert env.prm.calls >= 1


def _episode_key(e):
    return (e.steps, e.blocks, [s.tolist() for s in e.states], e.rewards, e.answer_text, e.correct,
            e.llm_calls, e.prompt_tokens, e.completion_tokens)


def test_sixteen_episodes_equal_sixteen_single_runs():
    lm = RuleLM()
    env16, trace16 = _run(lm, PROBLEMS, SCRIPT, prm=VerifierPRM(arithmetic_check))
    for i, p in enumerate(PROBLEMS):
        env1, trace1 = _run(RuleLM(), [p], SCRIPT[i:i + 1], prm=VerifierPRM(arithmetic_check))
        assert _episode_key(env1.episodes[0]) == _episode_key(env16.episodes[i])
        for (o16, r16, d16, _), (o1, r1, d1, _) in zip(trace16, trace1):
            np.testing.assert_array_equal(o16[i], o1[0])
            assert r16[i] == r1[0] and d16[i] == d1[0]


def test_done_rows_stay_done_and_bad_actions_are_rejected():
    env, trace = _run(RuleLM(), PROBLEMS[:2], np.array([[TERMINATE, REASON], [TERMINATE, DEBATE]]))
    (_, r0, d0, _), (_, r1, d1, calls) = trace
    assert d0.all() and d1.all() and (r1 == 0).all() and calls == 0
    assert [len(e.blocks) for e in env.episodes] == [1, 1]
    env.reset_problems(PROBLEMS[:2])
    with pytest.raises(ValueError, match="action 7 for episode 1"):
        env.step([0, 7])
    with pytest.raises(ValueError, match="3 actions for 2 episodes"):
        env.step([0, 0, 0])


def test_depth_limit_forces_the_answer():
    script = np.full((4, 3), REASON)
    env, trace = _run(RuleLM(), PROBLEMS[:4], script, max_depth=2)
    for e in env.episodes:
        assert e.done and e.blocks[-1] == TERMINATE and e.depth <= 2 and e.answer_text is not None


def test_a_first_refine_is_stored_as_the_reason_it_ran():
    # the authors' loop (`if start_flag and action == 3: action = 0`) stores Reason, so Q(root, Refine) is never
    # trained on Reason's returns
    from configs.rlot import get_config
    from trainers import dqn

    class Recording(ThoughtEnv):
        def step(self, actions):
            self.chosen.append(np.asarray(actions).copy())
            return super().step(actions)

    env = Recording(RuleLM(), PROBLEMS[:8], max_depth=2, max_width=3)
    env.chosen = []
    cfg = get_config("tiny").dqn
    cfg.update(dict(buffer_size=64, batch_size=8, episodes_per_batch=8, num_episodes=8, epsilon_floor=1.0,
                    epsilon_start=1.0))  # uniform random actions
    graphdef, state = dqn.init_state(cfg, obs_dim=7, num_actions=5)
    state, stats = dqn.EpisodeSource(env, n=8, max_steps=20, total_steps=1).run_batch(
        graphdef, state, dqn.Hyper.from_config(cfg))
    refine_first = env.chosen[0] == REFINE
    assert refine_first.any()  # this seed draws Refine first in some row
    firsts = np.asarray([e.blocks[0] for e in env.episodes])
    assert (firsts[refine_first] == REASON).all()
    assert [a[0] for a in stats.actions] == firsts.tolist()  # the statistics count what ran
    assert np.asarray(state.buf_action_C)[:8].tolist() == firsts.tolist()  # step 0's 8 transitions, row order


def test_a_width_or_depth_below_one_is_an_error():
    # max_width=0 ran: every Decompose listed its subtasks, solved none of them and summarised nothing
    with pytest.raises(ValueError, match=r"max_width=0: expected >= 1"):
        ThoughtEnv(RuleLM(), PROBLEMS, max_width=0)
    with pytest.raises(ValueError, match=r"max_depth=0: expected >= 1"):
        ThoughtEnv(RuleLM(), PROBLEMS, max_depth=0)


class Unfinished(RuleLM):
    """Check-finished always says no: an episode ends only by Terminate or the depth limit."""

    def generate(self, prompts, *, max_new_tokens=None):
        out = super().generate(prompts, max_new_tokens=max_new_tokens)
        return [Generation("No.", 1, 1) if p.endswith(P.CHECK_FINISHED) else g for p, g in zip(prompts, out)]


def test_refine_appends_its_rewrite_after_the_step_it_refines():
    """The authors' `refine_thought` extends the node's text with a new "STEP n: ... we refine the previous step"
    and appends the rewrite to the PRM's steps; the original step stays (an earlier version overwrote it, so the PRM
    and every later prompt lost it). The PRM scores both steps, the rewrite last."""

    class RecordingPRM(VerifierPRM):
        def score(self, questions, steps):
            self.seen = [list(s) for s in steps]
            return super().score(questions, steps)

    prm, lm = RecordingPRM(arithmetic_check), Unfinished()  # both episodes run on
    env = ThoughtEnv(lm, PROBLEMS[:2], prm=prm, max_depth=4, max_width=3)
    env.reset_problems(PROBLEMS[:2])
    env.step([REASON, REASON])
    first = [e.steps[0] for e in env.episodes]
    prompts = []
    generate = lm.generate
    lm.generate = lambda p, **kw: (prompts.extend(p), generate(p, **kw))[1]
    env.step([REFINE, REFINE])
    refined = [p for p in prompts if p.endswith(P.REFINE)]
    assert len(refined) == 2 and all(f"Step 1: {f}" in p for p, f in zip(refined, first))
    for e, f in zip(env.episodes, first):
        assert not e.done and e.blocks == [REASON, REFINE] and e.depth == 2
        assert len(e.steps) == 2 and e.steps[0] == f
    assert prm.seen == [e.steps for e in env.episodes]  # the rewrite is the latest step the reward scores


def test_an_episode_bound_below_max_depth_fails_before_any_llm_call():
    """A ThoughtEnv episode takes up to max_depth + 1 steps; with dqn.max_episode_steps below it the first batch spent
    its LLM calls (root evaluations, blocks) and then stopped with "still running after max_steps"."""
    from configs.rlot import get_config
    from trainers.dqn import train_dqn

    lm = CountingLM(RuleLM())
    env = ThoughtEnv(lm, PROBLEMS, max_depth=6, max_width=3)
    assert env.max_episode_length == 7
    config = get_config("tiny")
    config.dqn.update(dict(max_episode_steps=6, episodes_per_batch=8, num_episodes=8))
    with pytest.raises(ValueError, match=r"dqn\.max_episode_steps=6 is below env\.max_depth \+ 1 = 7.*expected "
                                         r"dqn\.max_episode_steps >= env\.max_depth \+ 1"):
        train_dqn(env, config)
    assert lm.calls == 0
    # the bound is tight: never terminating, an episode ends at step max_depth + 1, not before
    env = ThoughtEnv(Unfinished(), PROBLEMS[:2], max_depth=3, max_width=3)
    env.reset_problems(PROBLEMS[:2])
    assert [bool(env.step([REASON, DEBATE])[2].all()) for _ in range(env.max_episode_length)] == [False] * 3 + [True]


class AlwaysReason(ThoughtEnv):
    """Runs Reason whatever the navigator chose: only the depth limit ends an episode (with `Unfinished`)."""

    def step(self, actions):
        return super().step(np.full_like(np.asarray(actions), REASON))


def test_the_depth_limit_forces_the_answer_in_a_step_of_its_own():
    """The authors' `ENV.step` (env/environment_simple.py) counts `self.n_step += 1` and, `if self.n_step >
    self.max_depth`, answers whatever the action; below that it runs the block and asks check-finished. So with
    max_depth 2: 2 blocks, each an ordinary transition (PRM reward, not done), then a third transition that is a
    Terminate (the outcome reward, done). An earlier version forced the answer inside the 2nd block's step: the
    same 2 blocks but 2 transitions per episode (4 stored here, not 6), the 2nd carrying the outcome instead of
    its PRM score, and no check-finished after it."""
    from configs.rlot import get_config
    from trainers import dqn

    env = AlwaysReason(CountingLM(Unfinished()), PROBLEMS[12:15], prm=VerifierPRM(arithmetic_check), max_depth=2,
                       max_width=3)
    cfg = get_config("tiny").dqn
    cfg.update(dict(buffer_size=64, batch_size=8, episodes_per_batch=2, num_episodes=2))
    graphdef, state = dqn.init_state(cfg, obs_dim=7, num_actions=5)
    state, stats = dqn.EpisodeSource(env, n=2, max_steps=3, total_steps=1).run_batch(
        graphdef, state, dqn.Hyper.from_config(cfg))
    assert [e.blocks for e in env.episodes] == [[REASON, REASON, TERMINATE]] * 2
    assert stats.lengths == [3, 3] and stats.actions == [[REASON, REASON, TERMINATE]] * 2
    calls = {stage: [sum(i in rows for s, rows in env.stage_log if s == stage) for i in range(2)]
             for stage in ("reason", "check_finished", "evaluate", "terminate")}
    assert calls == {"reason": [2, 2], "check_finished": [2, 2], "evaluate": [3, 3], "terminate": [1, 1]}
    # the buffer, in row order per step: step 1 (slots 0, 1), step 2 (2, 3), the forced answer (4, 5)
    assert int(state.buf_size) == 6
    assert np.asarray(state.buf_action_C)[:6].tolist() == [REASON] * 4 + [TERMINATE] * 2
    assert np.asarray(state.buf_done_C)[:6].tolist() == [0, 0, 0, 0, 1, 1]
    rewards = np.asarray(state.buf_reward_C)[:6].tolist()
    assert [e.rewards for e in env.episodes] == [rewards[0::2], rewards[1::2]]
    # p14: PRM 1, PRM 0, then correct; p13: PRM 0, PRM 1, then wrong (the old version stored 1 and 0 in slots 2, 3)
    assert [e.problem.id for e in env.episodes] == ["p14", "p13"] and rewards == [1.0, 0.0, 0.0, 1.0, 1.0, 0.0]
    assert rewards[4:] == [float(e.correct) for e in env.episodes]
    obs, nxt = np.asarray(state.buf_obs_Cx7)[:6], np.asarray(state.buf_next_Cx7)[:6]
    np.testing.assert_array_equal(obs[4:], nxt[2:4])  # the forced step starts where the 2nd block left off ...
    np.testing.assert_array_equal(nxt[4:], obs[4:])  # ... and, as a Terminate, leaves the state as it was
    # the forced step is a chosen Terminate in every respect: same observations, rewards, done flags and blocks
    forced, trace_forced = _run(Unfinished(), PROBLEMS[:2], np.full((2, 3), DEBATE), max_depth=2)
    chosen, trace_chosen = _run(Unfinished(), PROBLEMS[:2], np.array([[DEBATE, DEBATE, TERMINATE]] * 2),
                                max_depth=2)
    for (o1, r1, d1, _), (o2, r2, d2, _) in zip(trace_forced, trace_chosen):
        np.testing.assert_array_equal(o1, o2)
        assert r1.tolist() == r2.tolist() and d1.tolist() == d2.tolist()
    assert [e.blocks for e in forced.episodes] == [e.blocks for e in chosen.episodes] == [[2, 2, 4]] * 2
    assert forced.executed.tolist() == [TERMINATE] * 2
