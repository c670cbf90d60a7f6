"""Tool-loop mechanics: terminations, T_max, bad calls, timeout clamping, observation messages."""

import concurrent.futures
import json

import pytest

from reasoner.agents.policies import Reply, ScriptedPolicy
from reasoner.agents.scratchpad import T_MAX, run_scratchpad
from reasoner.verifiers.z3_runner import Z3Result


class RecordingRunner:
    """Answers every script with `sat` and records the requested timeouts (no solver needed)."""

    def __init__(self):
        self.calls = []

    def submit(self, code, *, timeout_s):
        self.calls.append((code, timeout_s))
        future = concurrent.futures.Future()
        future.set_result(Z3Result(success=True, output="sat\n" + "x" * 5000, sat_result="sat", error=None,
                                   model=None, elapsed_s=0.01, verdicts=("sat",)))
        return future


def conv(prompt):
    return [{"role": "system", "content": "s"}, {"role": "user", "content": prompt}]


def call(name, **arguments):
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def test_default_t_max_is_ten():
    assert T_MAX == 10
    runner = RecordingRunner()
    (traj,) = run_scratchpad(ScriptedPolicy({"p": [call("z3_solve", smt_code="(check-sat)")] * 10}),
                             [("id", conv("p"))], runner=runner)
    assert traj.turns == 10 and traj.termination == "max_turns" and not traj.verified
    assert traj.answer == call("z3_solve", smt_code="(check-sat)") and len(runner.calls) == 10


def test_bad_calls_get_error_observations_and_the_episode_continues():
    runner = RecordingRunner()
    nan = '<tool_call>{"name": "z3_solve", "arguments": {"smt_code": "(check-sat)", "timeout": NaN}}</tool_call>'
    script = [call("search_web", q="x") + call("z3_solve", code="(check-sat)") + call("z3_solve", smt_code=" "),
              call("z3_solve", smt_code="(check-sat)", timeout=999) + call("z3_solve", smt_code="(check-sat)", timeout="x")
              + nan + call("z3_solve", smt_code="(check-sat)", timeout="-inf"),
              call("finish", answer=["A"])]
    (traj,) = run_scratchpad(ScriptedPolicy({"p": script}), [("id", conv("p"))], runner=runner, timeout_cap_s=30)
    errors = [o["error"] for o in traj.observations[:3]]
    assert "unknown tool 'search_web'" in errors[0]
    assert "non-empty string argument 'smt_code'" in errors[1] and "['code']" in errors[1]
    assert "smt_code" in errors[2]
    assert [t for _, t in runner.calls] == [30.0] * 4  # 999 clamped to the cap; "x", NaN and -inf -> the cap
    assert traj.termination == "finish" and traj.answer == '["A"]' and traj.turns == 3
    tool_messages = [m for m in traj.messages if m["role"] == "tool"]
    assert len(tool_messages) == 7 and all(m["name"] in ("z3_solve", "search_web") for m in tool_messages)
    visible = json.loads(tool_messages[3]["content"])
    assert set(visible) == {"success", "output", "sat_result", "error"} and visible["output"].endswith("[truncated]")
    assert traj.metadata["solver_calls"] == 4 and len(traj.metadata["errors"]) == 3


def test_reply_without_tool_call_ends_and_calls_before_finish_run():
    runner = RecordingRunner()
    plan = {"a": ["The answer is B."], "b": [call("z3_solve", smt_code="(check-sat)") + call("finish", answer="C")]}
    trajs = run_scratchpad(ScriptedPolicy(plan), [("a", conv("a")), ("b", conv("b"))], runner=runner)
    assert [(t.termination, t.verified, t.answer, t.turns) for t in trajs] == [
        ("no_tool_call", True, "The answer is B.", 1), ("finish", True, "C", 1)]
    assert trajs[1].messages[-1]["role"] == "tool" and len(runner.calls) == 1


def test_policy_contract_errors():
    class Broken:
        def respond(self, conversations):
            return [Reply("x")] * (len(conversations) + 1)

    with pytest.raises(ValueError, match="returned 2 replies for 1 conversations"):
        run_scratchpad(Broken(), [("id", conv("p"))], runner=RecordingRunner())
    with pytest.raises(ValueError, match="t_max must be >= 1"):
        run_scratchpad(Broken(), [("id", conv("p"))], runner=RecordingRunner(), t_max=0)


def test_token_counts_accumulate():
    class Counting:
        def respond(self, conversations):
            return [Reply(call("z3_solve", smt_code="(check-sat)"), prompt_tokens=10, completion_tokens=3)
                    for _ in conversations]

    (traj,) = run_scratchpad(Counting(), [("id", conv("p"))], runner=RecordingRunner(), t_max=4)
    assert traj.metadata["tokens"] == {"prompt": 40, "completion": 12}
    assert traj.to_dict()["metadata"]["termination"] == "max_turns"


def test_observation_record_keeps_every_verdict_of_a_real_z3_script():
    """A script with two check-sat commands: the message shows the last verdict (App. A.2's four fields), the
    record keeps both, as Z3 printed them, and the reason Z3 gave for nothing here (no unknown)."""
    from reasoner.verifiers.z3_runner import Z3Runner

    script = ("(declare-const x Int)(push)(assert (> x 2))(check-sat)(pop)"
              "(assert (and (> x 2) (< x 1)))(check-sat)")
    with Z3Runner(timeout_s=10.0, workers=1) as runner:
        (traj,) = run_scratchpad(ScriptedPolicy({"p": [call("z3_solve", smt_code=script), call("finish", answer="B")]}),
                                 [("id", conv("p"))], runner=runner)
    (record,) = traj.smt_observations
    assert record["verdicts"] == ["sat", "unsat"] and record["sat_result"] == "unsat"
    assert record["reason_unknown"] is None and record["success"] is True
    visible = json.loads(next(m for m in traj.messages if m["role"] == "tool")["content"])
    assert visible["sat_result"] == "unsat" and visible["output"].split() == ["sat", "unsat"]


def test_finish_without_an_answer_is_a_bad_call_and_the_episode_goes_on():
    """finish() or finish(answer=null) committed to the answer "null" as a verified finish; now an error
    observation, and the next turn's finish ends the episode with its answer."""
    runner = RecordingRunner()
    script = [call("finish"), call("finish", answer=None), call("finish", answer="B")]
    (traj,) = run_scratchpad(ScriptedPolicy({"p": script}), [("id", conv("p"))], runner=runner)
    assert traj.termination == "finish" and traj.answer == "B" and traj.verified and traj.turns == 3
    errors = [o["error"] for o in traj.observations if o.get("error")]
    assert len(errors) == 2 and all("finish needs an argument 'answer'" in e for e in errors)
    assert "got arguments []" in errors[0] and "got arguments ['answer']" in errors[1]


def test_an_unreadable_tool_call_is_an_error_observation_not_a_verified_answer():
    """Sequent-Prover App. E.1's envelope-level malformed call: "arguments" a JSON string and no "name". It was taken
    for a reply without a tool call (the episode ended "no_tool_call", verified, the broken call as the answer)."""
    runner = RecordingRunner()
    broken = '<tool_call>{"arguments":"{\\"smt_code\\":\\"(check-sat)\\"}"}</tool_call>'
    script = [broken, '<tool_call>{"name": "z3_solve", "arguments": {"smt_code": "(check-sat)"</tool_call>',
              call("finish", answer="B")]
    (traj,) = run_scratchpad(ScriptedPolicy({"p": script}), [("id", conv("p"))], runner=runner)
    assert (traj.termination, traj.verified, traj.answer, traj.turns) == ("finish", True, "B", 3)
    assert traj.calls[0] == {"turn": 0, "name": "<malformed>", "arguments": None, "parse_mode": "unreadable",
                             "raw": broken[len("<tool_call>"):-len("</tool_call>")]}
    seen = json.loads(traj.messages[3]["content"])  # the tool message the model reads after its broken call
    assert traj.messages[3]["role"] == "tool" and seen["success"] is False
    assert 'no "name" string' in seen["error"] and "['arguments']" in seen["error"]
    assert len(runner.calls) == 1 and traj.metadata["solver_calls"] == 1  # the repaired second call ran
    (last,) = run_scratchpad(ScriptedPolicy({"p": [broken]}), [("id", conv("p"))], runner=runner, t_max=1)
    assert (last.termination, last.verified) == ("max_turns", False)  # out of turns: unverified, not an answer
