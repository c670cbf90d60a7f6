"""The K-sample summary on hand-made trajectories (values derived by hand) and on the symbolic teacher with Z3."""

import pytest

from reasoner.agents.scratchpad import Trajectory
from reasoner.metrics.smt_eval import efficiency_profile, run_divergence, smt_eval_summary

UNSAT = {"tool": "z3_solve", "smt_code": "(declare-const bob Bool)(assert bob)(assert (not bob))(check-sat)",
         "success": True, "sat_result": "unsat", "error": None, "turn": 0}
ERROR = {"tool": "z3_solve", "smt_code": "(assert", "success": False, "sat_result": None, "error": "parse error",
         "turn": 0}


def _traj(pid, correct, answer, obs=(), turns=2, termination="finish"):
    t = Trajectory(problem_id=pid, messages=[], observations=list(obs), answer=answer, verified=termination == "finish",
                   termination=termination, turns=turns)
    t.correct = correct
    return t


def test_summary_by_hand():
    # P1 (gold A): A A B A, the first with an unsat call; P2 (gold C): B B B and one unfinished attempt
    p1 = [_traj("p1", True, "A", [UNSAT]), _traj("p1", True, "A", [ERROR]), _traj("p1", False, "B"),
          _traj("p1", True, "A", turns=3)]
    p2 = [_traj("p2", False, "B") for _ in range(3)] + [_traj("p2", False, None, termination="max_turns", turns=10)]
    trajs = p1 + p2
    answers = {id(t): t.answer for t in trajs}
    s = smt_eval_summary(trajs, k=4, answers=answers, gold={"p1": "A", "p2": "C"},
                         entities={"p1": {"bob"}, "p2": {"cat"}}, max_turns=10, n_resamples=200)
    assert s["avg@4"] == pytest.approx((3 / 4 + 0) / 2)
    assert s["pass@4"] == 0.5 and s["pass^4"] == 0.0 and s["stability"] == 0.0
    assert s["maj@4"] == 0.5  # P1's majority is A; P2's is B
    assert s["g-pass@4_0.75"] == 0.5 and s["g-pass@4_1"] == 0.0
    assert s["vcr"] == pytest.approx((1 / 4) / 2) and s["vcr_unsat"] == pytest.approx((1 / 4) / 2)
    assert s["soundness"] == pytest.approx(3 / 7)  # 7 finished attempts, 3 correct
    assert s["completeness"] == 1.0
    assert s["mean_grounding"] == 0.5  # two calls: the unsat script names "bob" (1.0), the broken one nothing
    assert s["efficiency_profile"]["budget_curve"][1] == pytest.approx(2 / 8)  # two correct within 2 turns
    assert s["intervals"]["avg@4"]["low"] <= s["avg@4"] <= s["intervals"]["avg@4"]["high"]


def test_efficiency_profile_and_divergence():
    trajs = [_traj("a", True, "A", turns=1), _traj("a", True, "A", turns=3), _traj("a", False, "B", turns=2)]
    prof = efficiency_profile(trajs, max_turns=3)
    assert prof["first_success_turn"] == 2.0 and prof["budget_curve"] == [1 / 3, 1 / 3, 2 / 3]
    assert run_divergence([_traj("a", True, "A", [UNSAT])], [_traj("a", True, "A", [UNSAT])]) == 0.0
    assert run_divergence([_traj("a", True, "A", [ERROR])], [_traj("a", True, "A", [UNSAT])]) is None


def test_wrong_sample_counts_are_named():
    t = [_traj("p", True, "A")]
    with pytest.raises(ValueError, match="expected K=2 attempts per problem"):
        smt_eval_summary(t, k=2, answers={id(t[0]): "A"}, gold={"p": "A"}, entities={}, max_turns=10)


def test_soundness_interval_resamples_problems():
    """Soundness pools the verified attempts of every problem; its interval resamples problems: with K = 4 attempts
    that agree within a problem, the interval is the problem-level bootstrap's (the same numbers as
    `cluster_bootstrap_interval` over the problems), not the far narrower one over the 24 attempts."""
    import numpy as np

    from reasoner.metrics.intervals import bootstrap_interval, cluster_bootstrap_interval

    right = [True, False, True, True, False, True]
    trajs = [_traj(f"p{i}", ok, "A" if ok else "B") for i, ok in enumerate(right) for _ in range(4)]
    s = smt_eval_summary(trajs, k=4, answers={id(t): t.answer for t in trajs}, gold={f"p{i}": "A" for i in range(6)},
                         entities={}, max_turns=10, n_resamples=500, seed=3)
    ref = cluster_bootstrap_interval(np.repeat(np.array(right, float), 4), np.repeat(np.arange(6), 4), seed=3,
                                     n_resamples=500)
    got = s["intervals"]["soundness"]
    assert got == {"estimate": ref.estimate, "low": ref.low, "high": ref.high}
    assert got["estimate"] == pytest.approx(s["soundness"]) == pytest.approx(4 / 6)
    attempts = bootstrap_interval(np.repeat(np.array(right, float), 4), seed=3, n_resamples=500)
    assert got["high"] - got["low"] > 1.5 * (attempts.high - attempts.low)
