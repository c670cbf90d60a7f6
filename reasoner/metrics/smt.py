"""SMT-quality and agent-process metrics of Sequent-Prover (App. B.2, B.3, D.4) over scored trajectories.

Inputs: trajectories (`reasoner.agents.scratchpad.Trajectory`, `correct` set) and the entity set
of each problem (`curation.problem_entities`). A call's executability and verdict are always read through
`curation.call_outcome` (executable: a real sat/unsat verdict before the call's first failure; see that module),
so curation and every metric here agree. Definitions where the paper's formulas are not given:
  per-attempt lift (Table 9)  any_nontrivial / any_grounded / any_real_verdict: fraction of attempts
                              with at least one SMT call having the attribute (all attempts count);
  vcr                         correct and at least one executable call with a real verdict (sat|unsat);
  vcr_unsat                   correct and at least one executable call whose verdict is unsat;
  first_pass_validity         among attempts with SMT calls, the first call was executable;
  error_rate / no_verdict_rate  over SMT calls: not executable / no sat|unsat verdict;
  verdict_distribution        over SMT calls: sat, unsat, unknown (incl. timeouts), error (the call
                              was not executable), none (ran cleanly but printed no verdict); an executable
                              call whose later command failed counts under its verdict;
  soundness                   P(correct | verified), verified = ended by an answer, not by T_max;
  recovery                    P(correct | the first SMT call failed);
  tool_efficiency             correct attempts per solver call; turn_efficiency correct per turn;
  wasted_turns                mean per attempt of turns whose every solver call failed or repeated
                              an earlier script of the attempt (comments/whitespace ignored) or was not
                              executable, and
                              non-final turns without any tool call;
  unique_skeletons            per problem, distinct action skeletons (e.g. z3:error>z3:unsat>finish)
                              over attempts, divided by attempts; mean over problems;
  structural divergence (D.4) production counts of the final parseable SMT call; across: per
                              trajectory JSD(P_j || pooled peers), >= 2 parsed peers, mean per task,
                              then over tasks; within: first-last and mean adjacent JSD for
                              trajectories with >= 2 parseable calls, mean over trajectories.
Rates with an empty denominator are None.
"""

from __future__ import annotations

import collections
import statistics

from reasoner.verifiers import smtlib
from reasoner.verifiers.curation import call_attributes, call_outcome


def _rate(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _normalised(code: str) -> str:
    try:
        return smtlib.strip_comments(code)
    except smtlib.SmtParseError:
        return " ".join(code.split())


def skeleton(trajectory) -> str:
    """The action skeleton of an attempt: solver calls by outcome, then how it ended."""
    steps = []
    for obs in trajectory.observations:
        if obs.get("tool") != "z3_solve":
            steps.append(f"{obs.get('tool')}:bad")
        else:
            executable, verdict = call_outcome(obs)
            steps.append(f"z3:{verdict}" if executable else "z3:error")
    steps.append(trajectory.termination)
    return ">".join(steps)


def wasted_turns(trajectory) -> int:
    seen, wasted = set(), 0
    by_turn = collections.defaultdict(list)
    for obs in trajectory.observations:
        by_turn[obs["turn"]].append(obs)
    called_turns = {c["turn"] for c in trajectory.calls}
    for turn in range(trajectory.turns):
        observations = by_turn.get(turn, [])
        if not observations:
            if turn not in called_turns and turn != trajectory.turns - 1:
                wasted += 1
            continue
        useful = False
        for obs in observations:
            key = _normalised(obs["smt_code"]) if obs.get("smt_code") else None
            if key and call_outcome(obs)[0] and key not in seen:
                useful = True
            if key:
                seen.add(key)
        wasted += not useful
    return wasted


def parsed_programs(trajectory) -> list[collections.Counter]:
    """The SMT-LIB production counts of each program the trajectory sent to Z3 that parses (others are left out)."""
    programs = []
    for obs in trajectory.smt_observations:
        try:
            counts = smtlib.production_counts(obs["smt_code"])
        except smtlib.SmtParseError:
            continue
        if counts:
            programs.append(counts)
    return programs


def structural_divergence(trajectories) -> dict:
    """App. D.4 across-trajectory peer divergence and within-trajectory drifts (bits)."""
    finals = collections.defaultdict(list)
    first_last, adjacent = [], []
    for traj in trajectories:
        programs = parsed_programs(traj)
        if programs:
            finals[traj.problem_id].append(programs[-1])
        if len(programs) >= 2:
            first_last.append(smtlib.js_divergence(programs[0], programs[-1]))
            adjacent.append(statistics.fmean(smtlib.js_divergence(a, b) for a, b in zip(programs, programs[1:])))
    per_task = []
    for programs in finals.values():
        if len(programs) < 3:
            continue  # each scored program needs at least two parsed peers
        scores = []
        for j, own in enumerate(programs):
            peers = collections.Counter()
            for i, other in enumerate(programs):
                if i != j:
                    peers.update(other)
            scores.append(smtlib.js_divergence(own, peers))
        per_task.append(statistics.fmean(scores))
    return {"across": _mean(per_task), "across_tasks": len(per_task),
            "within_first_last": _mean(first_last), "within_adjacent": _mean(adjacent),
            "within_trajectories": len(first_last)}


def _outcome(call) -> str:
    """sat / unsat / unknown for a clean run, "error" when the call failed, "none" for a clean run
    without any check-sat verdict. A timed-out call counts as unknown (Z3's own reading of it)."""
    if call.verdict == "unknown":
        return "unknown"
    if not call.executable:
        return "error"
    return call.verdict if call.verdict in ("sat", "unsat") else "none"


def smt_metrics(trajectories, entities_by_problem: dict[str, set[str]]) -> dict:
    """All metrics of the module docstring for a list of scored trajectories."""
    if any(t.correct is None for t in trajectories):
        raise ValueError("every trajectory needs `correct` set (score it with the task's check_correct)")
    n = len(trajectories)
    lift = collections.Counter()
    calls_total, errors, no_verdict, verdicts = 0, 0, 0, collections.Counter()
    vcr = vcr_unsat = first_valid = with_calls = 0
    recovered = first_failed = 0
    solver_calls = turns = 0
    skeletons = collections.defaultdict(set)
    attempts = collections.Counter()
    for traj in trajectories:
        entities = entities_by_problem.get(traj.problem_id, set())
        attrs = [call_attributes(o, entities) for o in traj.smt_observations]
        lift["any_nontrivial"] += any(not a.trivial for a in attrs)
        lift["any_grounded"] += any(a.grounded for a in attrs)
        lift["any_real_verdict"] += any(a.real_verdict for a in attrs)
        vcr += traj.correct and any(a.real_verdict for a in attrs)
        vcr_unsat += traj.correct and any(a.real_verdict and a.verdict == "unsat" for a in attrs)
        if attrs:
            with_calls += 1
            first_valid += attrs[0].executable
            if not attrs[0].executable:
                first_failed += 1
                recovered += bool(traj.correct)
        for a in attrs:
            calls_total += 1
            errors += not a.executable
            no_verdict += not a.real_verdict
            verdicts[_outcome(a)] += 1
        solver_calls += len(attrs)
        turns += traj.turns
        skeletons[traj.problem_id].add(skeleton(traj))
        attempts[traj.problem_id] += 1
    verified = [t for t in trajectories if t.verified]
    correct = sum(bool(t.correct) for t in trajectories)
    return {
        "attempts": n, "accuracy": _rate(correct, n),
        **{k: _rate(lift[k], n) for k in ("any_nontrivial", "any_grounded", "any_real_verdict")},
        "vcr": _rate(vcr, n), "vcr_unsat": _rate(vcr_unsat, n),
        "first_pass_validity": _rate(first_valid, with_calls),
        "solver_calls": calls_total, "error_rate": _rate(errors, calls_total),
        "no_verdict_rate": _rate(no_verdict, calls_total),
        "verdict_distribution": {k: _rate(verdicts[k], calls_total)
                                 for k in ("sat", "unsat", "unknown", "error", "none")},
        "soundness": _rate(sum(bool(t.correct) for t in verified), len(verified)),
        "recovery": _rate(recovered, first_failed),
        "tool_efficiency": _rate(correct, solver_calls), "turn_efficiency": _rate(correct, turns),
        "wasted_turns": _mean([wasted_turns(t) for t in trajectories]),
        "unique_skeletons": _mean([len(skeletons[p]) / attempts[p] for p in attempts]),
        "structural_divergence": structural_divergence(trajectories),
    }
