"""The RL-of-Thoughts MDP over logic blocks, stepping N episodes at once.

Protocol (what `trainers.dqn` trains):
    obs = env.reset(rng, n)                   # float32[n, 7]: the self-evaluation scores of each root
    obs, reward, done = env.step(actions)     # actions int32[n]; float32[n, 7], float32[n], bool[n]
A done row stays done: its later actions are ignored and its reward is 0 until the next reset.
`reset_problems(problems)` starts episodes on given problems (evaluation, tests); `reset` draws n training
problems uniformly with repetition from the pool (the authors' "failed problems sampled at random").

Actions: 0 Reason one step, 1 Decompose, 2 Debate, 3 Refine, 4 Terminate. The rules live here, not in the DQN:
  * Refine is never first: chosen on a thought without steps it runs Reason (training and test alike);
  * Refine APPENDS its rewrite of the last step as a new step; the original step stays in the thought. The paper
    says only that Refine refines existing reasoning "for clarity and correctness" (App. K.2) and that an
    unnecessary Refine can "replace a correct intermediate result with an erroneous identity" (App. B.2), which
    the reasoning that follows a rewrite does either way; the details file's "the result replaces the same node"
    names the tree node, whose text the authors' `refine_thought` sets to the old text plus a new "STEP n: ... we
    refine the previous step" while `thought_each_step` (the PRM's steps) gets the refined step appended. So later
    prompts see both versions, the PRM scores the rewrite as the latest step in the context of the original, and
    the episode's step count grows by one, as in the authors' code;
  * after each non-terminal block a check-finished prompt asks whether a final answer has been given; "yes"
    leaves only Terminate, which the environment takes in the same step (that transition is terminal and carries
    the outcome reward), as the authors' `ENV.step` (env/environment_simple.py: `finished = self.check_finished()`
    then `get_answer()` and `return ..., self.equal(ans, self.ans), True`);
  * the depth limit, as the authors' `ENV.step` (after its first-Refine rule: `self.n_step += 1`, then
    `if self.n_step > self.max_depth:` the answer is forced whatever the action): `max_depth` blocks run, each an
    ordinary transition (check-finished asked, the PRM's reward, the next state evaluated), and the step after
    the `max_depth`-th block answers whatever the navigator chose: a transition of its own that is a Terminate in
    every respect (reward = the outcome, done, `executed` and `blocks` say Terminate), so an episode takes at most
    `max_depth + 1` steps. An earlier version forced the answer inside the `max_depth`-th block's step: the same
    number of blocks, but the last block got the outcome reward instead of its PRM score, no check-finished, and
    one transition fewer than the authors'. Choice: the forced transition stores Terminate, the action that ran;
    the authors' loop (train_Dueling_DDQN_MATH.py l. 227 `exp = Experience(state,action,reward,done,state_next)`) stores
    the chosen action, which trains Q(s, a) toward the outcome for a block a that did not run (the state carries
    no depth, so the same s at a shallower depth would continue), while the paper says only that "a maximum
    action limit triggers termination". A terminal transition's next state is the last evaluated one (the
    authors evaluate the answer's thought, one more LLM call whose result the done mask of the target discards);
  * Terminate asks for the final answer in the task's format; the episode ends with reward 1 when it is correct,
    else 0 (an answer that cannot be extracted is wrong).
Rewards: after a non-terminal block that does not end the episode, the PRM's score of the latest step.

Batching: within one `step`, every LLM call the rows need at one stage of one block is ONE `lm.generate` call
(block order Reason, Decompose, Debate, Refine; Decompose solves subtask k of every decomposing row in one call),
followed by one check-finished call, one Terminate call for every ending row, one self-evaluation call and one
PRM call for the continuing rows. So the number of LLM calls of a step depends on which blocks were chosen,
never on N.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import numpy as np

from reasoner.agents.rlot import prompts as P
from reasoner.agents.rlot.prm import OutcomeOnlyPRM
from reasoner.tasks.answers import is_correct
from reasoner.tasks.reasoning import FORMAT_INSTRUCTIONS, Problem, extract

REASON, DECOMPOSE, DEBATE, REFINE, TERMINATE = range(5)
BLOCK_NAMES = ("reason", "decompose", "debate", "refine", "terminate")


@dataclasses.dataclass
class Episode:
    """One episode's record. `blocks` are the blocks run (after the environment's rules; a forced answer shows
    as a final Terminate); `llm_calls`, `prompt_tokens`, `completion_tokens` count this episode's prompts."""

    problem: Problem
    steps: list[str] = dataclasses.field(default_factory=list)
    blocks: list[int] = dataclasses.field(default_factory=list)
    states: list[np.ndarray] = dataclasses.field(default_factory=list)
    rewards: list[float] = dataclasses.field(default_factory=list)
    done: bool = False
    answer_text: str | None = None
    answer: str | None = None
    correct: bool = False
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def depth(self) -> int:
        return sum(b != TERMINATE for b in self.blocks)


class ThoughtEnv:
    """The batched environment (see the module docstring).

    lm: a `reasoner.agents.rlot.llm.BatchLM`. problems: the training pool for `reset`. prm: a
    `ProcessRewardModel` (default outcome only). max_depth: non-terminal blocks before the answer is forced (in
    the step after the last one).
    max_width: at most this many subtasks of a Decompose. max_new_tokens: per block stage (None: the LM's default);
    eval_max_new_tokens: for the self-evaluation and check-finished replies.
    """

    obs_dim = 7
    num_actions = 5
    max_episode_length_key = "env.max_depth + 1"  # what bounds an episode, in config keys (`trainers.dqn` names it)

    def __init__(self, lm, problems: Sequence[Problem] = (), *, prm=None, max_depth: int = 5, max_width: int = 5,
                 max_new_tokens: int | None = None, eval_max_new_tokens: int | None = None):
        if max_depth < 1:
            raise ValueError(f"max_depth={max_depth}: expected >= 1")
        if max_width < 1:  # 0 made every Decompose solve no subtask and summarise nothing, silently
            raise ValueError(f"max_width={max_width}: expected >= 1 (the most subtasks a Decompose solves)")
        self.lm, self.problems = lm, list(problems)
        self.prm = prm if prm is not None else OutcomeOnlyPRM()
        self.max_depth, self.max_width = int(max_depth), int(max_width)
        self.max_new_tokens, self.eval_max_new_tokens = max_new_tokens, eval_max_new_tokens
        self.episodes: list[Episode] = []
        self.obs = np.zeros((0, self.obs_dim), np.float32)
        self.unparsed_states = 0  # self-evaluation replies with no score at all (all-zero state)
        self.evaluated_states = 0
        self.stage_log: list[tuple[str, list[int]]] = []  # (stage, episode rows) of every LLM call, in order

    @property
    def max_episode_length(self) -> int:
        """The most `step` calls an episode takes: `max_depth` blocks, then the forced answer's step (module
        docstring). `trainers.dqn.train_dqn` checks its step bound against this."""
        return self.max_depth + 1

    # ------------------------------------------------------------------------------------------ protocol

    def reset(self, rng, n: int) -> np.ndarray:
        """n episodes on problems drawn uniformly with repetition from the pool (by `rng`, a raw jax key)."""
        import jax

        if not self.problems:
            raise ValueError("ThoughtEnv.reset: the problem pool is empty; pass problems= or use reset_problems")
        picks = np.asarray(jax.random.randint(jax.random.wrap_key_data(rng), (int(n),), 0, len(self.problems)))
        return self.reset_problems([self.problems[int(i)] for i in picks])

    def reset_problems(self, problems: Sequence[Problem]) -> np.ndarray:
        self.episodes = [Episode(problem=p) for p in problems]
        rows = list(range(len(self.episodes)))
        self.obs = np.zeros((len(rows), self.obs_dim), np.float32)
        self._evaluate(rows)
        return self.obs.copy()

    def step(self, actions) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        actions = np.asarray(actions).reshape(-1)
        n = len(self.episodes)
        if actions.shape[0] != n:
            raise ValueError(f"ThoughtEnv.step: {actions.shape[0]} actions for {n} episodes; expected one per episode")
        reward = np.zeros((n,), np.float32)
        active = [i for i, e in enumerate(self.episodes) if not e.done]
        chosen = {}
        for i in active:
            a, e = int(actions[i]), self.episodes[i]
            if not 0 <= a < self.num_actions:
                raise ValueError(f"ThoughtEnv.step: action {a} for episode {i}; expected 0..{self.num_actions - 1}")
            # after max_depth blocks the answer is forced; a first Refine runs Reason
            chosen[i] = TERMINATE if e.depth >= self.max_depth else REASON if a == REFINE and not e.steps else a
            e.blocks.append(chosen[i])
        # what ran: the authors' DQN stores a first Refine as the Reason it ran (and ours a forced answer as Terminate)
        self.executed = np.asarray([chosen.get(i, int(actions[i])) for i in range(n)], actions.dtype)
        for block, run in ((REASON, self._reason), (DECOMPOSE, self._decompose), (DEBATE, self._debate),
                           (REFINE, self._refine)):
            rows = [i for i in active if chosen[i] == block]
            if rows:
                run(rows)
        worked = [i for i in active if chosen[i] != TERMINATE]
        replies = self._ask("check_finished", worked, [self._prefix(i) + P.CHECK_FINISHED for i in worked],
                            self.eval_max_new_tokens)
        finished = [i for i, r in zip(worked, replies) if P.says_finished(r)]
        for i in finished:
            self.episodes[i].blocks.append(TERMINATE)
        self._terminate(sorted([i for i in active if chosen[i] == TERMINATE] + finished), reward)
        continuing = [i for i in worked if i not in set(finished)]
        self._evaluate(continuing)
        if continuing:
            scores = self.prm.score([self.episodes[i].problem.question for i in continuing],
                                    [list(self.episodes[i].steps) for i in continuing])
            reward[continuing] = np.asarray(scores, np.float32)
        for i in active:
            self.episodes[i].rewards.append(float(reward[i]))
        done = np.array([e.done for e in self.episodes], bool)
        return self.obs.copy(), reward, done

    # ------------------------------------------------------------------------------------------- helpers

    def _prefix(self, i: int) -> str:
        e = self.episodes[i]
        return P.thought_prefix(e.problem.question, e.steps)

    def _ask(self, stage: str, rows: list[int], prompts: list[str], max_new_tokens: int | None = None) -> list[str]:
        """One batched LLM call for `prompts` (prompt k belongs to episode rows[k]), logged as `stage`."""
        if not rows:
            return []
        self.stage_log.append((stage, list(rows)))
        outs = self.lm.generate(prompts, max_new_tokens=max_new_tokens or self.max_new_tokens)
        for i, g in zip(rows, outs):
            e = self.episodes[i]
            e.llm_calls += 1
            e.prompt_tokens += g.prompt_tokens
            e.completion_tokens += g.completion_tokens
        # a lone surrogate (an endpoint's JSON may hold "\ud800") becomes "?": tokenizers refuse such text, so the next
        # prompt or the Math-Shepherd PRM raised a TypeError out of `step`
        return [g.text.encode("utf-8", "replace").decode("utf-8") for g in outs]

    def _evaluate(self, rows: list[int]) -> None:
        replies = self._ask("evaluate", rows, [self._prefix(i) + P.EVALUATE for i in rows],
                            self.eval_max_new_tokens)
        for i, reply in zip(rows, replies):
            scores, parsed = P.parse_scores(reply)
            self.unparsed_states += int(not parsed)
            self.evaluated_states += 1
            self.obs[i] = scores
            self.episodes[i].states.append(scores)

    @staticmethod
    def _clean(text: str) -> str:
        return text.strip() or "(no output)"

    def _reason(self, rows: list[int]) -> None:
        for i, text in zip(rows, self._ask("reason", rows, [self._prefix(i) + P.REASON for i in rows])):
            self.episodes[i].steps.append(self._clean(text))

    def _refine(self, rows: list[int]) -> None:
        """The rewrite of the last step is appended (module docstring: the authors' code keeps the original)."""
        for i, text in zip(rows, self._ask("refine", rows, [self._prefix(i) + P.REFINE for i in rows])):
            self.episodes[i].steps.append(self._clean(text))

    def _decompose(self, rows: list[int]) -> None:
        listed = self._ask("decompose/list", rows, [self._prefix(i) + P.DECOMPOSE for i in rows])
        subtasks = {i: P.parse_subtasks(t, limit=self.max_width) for i, t in zip(rows, listed)}
        solved: dict[int, list[str]] = {i: [] for i in rows}

        def context(i: int) -> str:
            lines = ["Subtasks:"] + [f"Subtask{k + 1}: {s}" for k, s in enumerate(subtasks[i])]
            lines += [f"Reasoning for Subtask{k + 1}: {r}" for k, r in enumerate(solved[i])]
            return self._prefix(i) + "\n".join(lines) + "\n\n"

        for k in range(max(len(s) for s in subtasks.values())):
            todo = [i for i in rows if len(subtasks[i]) > k]
            replies = self._ask(f"decompose/subtask{k + 1}", todo,
                                [context(i) + P.SOLVE_SUBTASK.format(subtask=subtasks[i][k]) for i in todo])
            for i, r in zip(todo, replies):
                solved[i].append(self._clean(r))
        summaries = self._ask("decompose/summary", rows, [context(i) + P.SUMMARISE for i in rows])
        for i, s in zip(rows, summaries):
            self.episodes[i].steps.append(self._clean(s))

    def _debate(self, rows: list[int]) -> None:
        listed = self._ask("debate/plans", rows, [self._prefix(i) + P.DEBATE for i in rows])
        plans = {i: P.parse_plans(t) for i, t in zip(rows, listed)}
        listing = {i: "\n".join(f"Plan{k + 1}: {p}" for k, p in enumerate(plans[i])) for i in rows}
        verdicts = self._ask("debate/aggregate", rows,
                             [self._prefix(i) + P.AGGREGATE.format(plans=listing[i]) for i in rows])
        best = {i: plans[i][P.parse_best_plan(v, len(plans[i]))] for i, v in zip(rows, verdicts)}
        steps = self._ask("debate/step", rows, [self._prefix(i) + P.FOLLOW_PLAN.format(plan=best[i]) for i in rows])
        for i, s in zip(rows, steps):
            self.episodes[i].steps.append(self._clean(s))

    def _terminate(self, rows: list[int], reward: np.ndarray) -> None:
        prompts = [self._prefix(i) + P.TERMINATE.format(format=FORMAT_INSTRUCTIONS[self.episodes[i].problem.kind])
                   for i in rows]
        for i, text in zip(rows, self._ask("terminate", rows, prompts)):
            e = self.episodes[i]
            e.answer_text = text
            e.answer = extract(e.problem, text)
            e.correct = is_correct(e.problem.kind, e.answer, e.problem.gold)
            e.done = True
            reward[i] = float(e.correct)


def rollout(env: ThoughtEnv, choose: Callable[[np.ndarray], np.ndarray], problems: Sequence[Problem]) -> list[Episode]:
    """Runs one episode per problem to the end with `choose(obs_Nx7) -> actions int[N]` (e.g. a greedy navigator)."""
    obs = env.reset_problems(problems)
    done = np.zeros((len(problems),), bool)
    for _ in range(env.max_episode_length):  # every step ends a row or adds a block; max_depth blocks force the end
        if done.all():
            break
        obs, _, done = env.step(np.asarray(choose(obs), np.int32))
    if not done.all():
        raise RuntimeError("rollout: episodes still running past the depth limit (environment bug)")
    return list(env.episodes)
