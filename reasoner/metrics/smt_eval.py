"""The summary of a K-sample scratchpad evaluation (`reasoner smt eval`): every App. B metric the data allows.

Input: scored trajectories (`Trajectory.correct` set by the task), K per problem, and each problem's gold letter
and entity set. The summary holds
  - reliability, named with the K used: avg@K, pass@K, pass^K, stability, maj@K, auc@K, g-pass@K_a for the
    App. B ladder a in {0.25, 0.5, 0.75, 1.0} (`reasoner.metrics.reliability`, `sample_metrics`);
  - agent reliability: soundness, completeness, ECE, recovery, tool / turn efficiency, wasted turns, unique
    skeletons (`reasoner.metrics.smt.smt_metrics`, `sample_metrics`);
  - SMT quality (a call is executable when Z3 reached a sat/unsat verdict before its first failure:
    `reasoner.verifiers.curation.call_outcome`): vcr, vcr_unsat, first-pass validity, error and no-verdict rates, the Z3 outcome distribution,
    mean grounding (over SMT calls), structural divergence;
  - the efficiency profile: the turn of each correct attempt's finish (mean and histogram) and the budget curve,
    accuracy when attempts are cut after t turns (an attempt counts as correct at t when it finished correctly
    within t turns), t = 1..max turns;
  - 95% intervals: percentile bootstrap over problems (the unit that is sampled) for the reliability and
    quality rates, seeded; soundness, a rate over the verified attempts, gets the cluster bootstrap over problems
    (`intervals.cluster_bootstrap_interval`: a resample drawing no verified attempt is dropped).
`run_divergence` compares two runs (e.g. SFT and SFT+DPO): the Jensen-Shannon divergence of the pooled SMT-LIB
production counts of their final parseable calls.
"""

from __future__ import annotations

import collections
from typing import Mapping, Sequence

import numpy as np

from reasoner.metrics import sample_metrics as sm
from reasoner.metrics.intervals import bootstrap_interval, cluster_bootstrap_interval
from reasoner.metrics.reliability import pass_at_k_single, pass_hat_k_single
from reasoner.metrics.smt import parsed_programs, smt_metrics
from reasoner.verifiers import smtlib
from reasoner.verifiers.curation import call_outcome, grounding


def _by_problem(trajectories, K: int) -> dict[str, list]:
    groups: dict[str, list] = collections.defaultdict(list)
    for traj in trajectories:
        if traj.correct is None:
            raise ValueError(f"trajectory {traj.problem_id}: correct is unset; score it with the task first")
        groups[traj.problem_id].append(traj)
    wrong = {p: len(g) for p, g in groups.items() if len(g) != K}
    if wrong:
        raise ValueError(f"expected K={K} attempts per problem; got {dict(list(wrong.items())[:5])}")
    return groups


def _executable_verdicts(trajectory) -> list[str]:
    """The verdicts of the trajectory's executable calls (`curation.call_outcome`, the rule curation and
    `smt_metrics` use), so the per-problem vcr here equals `smt_metrics`' pooled vcr."""
    verdicts = []
    for obs in trajectory.smt_observations:
        executable, verdict = call_outcome(obs)
        if executable:
            verdicts.append(verdict)
    return verdicts


def _interval(values: Sequence[float], *, seed: int, n_resamples: int) -> dict | None:
    values = [v for v in values if v is not None]
    if not values:
        return None
    i = bootstrap_interval(np.asarray(values, np.float64), n_resamples=n_resamples, seed=seed)
    return {"estimate": i.estimate, "low": i.low, "high": i.high}


def smt_eval_summary(trajectories, *, k: int, answers: Mapping[int, str | None], gold: Mapping[str, str],
                     entities: Mapping[str, set[str]], max_turns: int, seed: int = 0,
                     n_resamples: int = 2000) -> dict:
    """The summary above. `answers[id(traj)]` is the option letter each trajectory committed to (None if none)."""
    groups = _by_problem(trajectories, k)
    ids = sorted(groups)
    correct = {p: [bool(t.correct) for t in groups[p]] for p in ids}
    c = np.array([sum(correct[p]) for p in ids])
    n = np.full(len(ids), k)
    per = {  # per-problem values, so every rate gets a bootstrap interval over problems
        f"avg@{k}": c / k,
        f"pass@{k}": [pass_at_k_single(k, int(x), k) for x in c],
        f"pass^{k}": [pass_hat_k_single(k, int(x), k) for x in c],
        f"maj@{k}": [sm.maj_at_k_single([answers[id(t)] for t in groups[p]], gold[p], k) for p in ids],
        "vcr": [np.mean([t.correct and any(r in ("sat", "unsat") for r in _executable_verdicts(t))
                         for t in groups[p]]) for p in ids],
        "vcr_unsat": [np.mean([t.correct and "unsat" in _executable_verdicts(t) for t in groups[p]]) for p in ids],
    }
    summary: dict = {"problems": len(ids), "k": k, "attempts": int(c.size * k)}
    summary.update({key: float(np.mean(v)) for key, v in per.items()})
    summary["stability"] = summary[f"pass^{k}"] / summary[f"pass@{k}"] if summary[f"pass@{k}"] else None
    summary[f"auc@{k}"] = sm.auc_at_k(n, c, k=k)
    for alpha in sm.GPASS_ALPHAS:
        summary[f"g-pass@{k}_{alpha:g}"] = sm.g_pass_at_k(n, c, k=k, alpha=alpha)
    flat = [t for p in ids for t in groups[p]]
    summary["completeness"] = sm.completeness([t.correct for t in flat], [t.verified for t in flat])
    summary["ece"] = sm.consistency_ece([[answers[id(t)] for t in groups[p]] for p in ids], [gold[p] for p in ids])
    summary.update(smt_metrics(flat, dict(entities)))
    scores = [grounding(o["smt_code"], entities.get(t.problem_id, set())) for t in flat for o in t.smt_observations]
    summary["mean_grounding"] = float(np.mean(scores)) if scores else None
    summary["efficiency_profile"] = efficiency_profile(flat, max_turns=max_turns)
    summary["intervals"] = {key: _interval(v, seed=seed, n_resamples=n_resamples) for key, v in per.items()}
    # soundness pools the verified attempts of every problem: the problems are resampled, not the attempts
    verified = [(float(bool(t.correct)), i) for i, p in enumerate(ids) for t in groups[p] if t.verified]
    summary["intervals"]["soundness"] = None
    if verified:
        values, clusters = zip(*verified)
        i = cluster_bootstrap_interval(values, clusters, n_clusters=len(ids), seed=seed, n_resamples=n_resamples)
        summary["intervals"]["soundness"] = {"estimate": i.estimate, "low": i.low, "high": i.high}
    return summary


def efficiency_profile(trajectories, *, max_turns: int) -> dict:
    """Finish turn of the correct attempts (mean, histogram) and accuracy within a budget of t turns."""
    finished = [t.turns for t in trajectories if t.correct and t.termination == "finish"]
    histogram = collections.Counter(finished)
    total = len(trajectories)
    curve = [sum(1 for x in finished if x <= budget) / total if total else None for budget in range(1, max_turns + 1)]
    return {"first_success_turn": float(np.mean(finished)) if finished else None,
            "turn_histogram": {str(t): histogram[t] for t in sorted(histogram)}, "budget_curve": curve}


def _final_programs(trajectories) -> collections.Counter:
    """The production counts of each trajectory's final parseable SMT call, pooled."""
    pooled: collections.Counter = collections.Counter()
    for traj in trajectories:
        programs = parsed_programs(traj)
        if programs:
            pooled.update(programs[-1])
    return pooled


def run_divergence(run_a, run_b) -> float | None:
    """JSD (bits) between the pooled production counts of two runs' final parseable SMT calls; None if either
    run has none."""
    a, b = _final_programs(run_a), _final_programs(run_b)
    return smtlib.js_divergence(a, b) if a and b else None
