"""`reasoner smt eval --json`: the printed avg@K, pass@K, pass^K and maj@K equal a brute-force recomputation from
the `--samples-out` rows (every k-subset of a problem's K attempts enumerated; no project reliability code).

Two policies through the same CLI path (`SamplerPolicy` over a checkpoint directory): a tiny random model sampled
at temperature 1 (K = 4 distinct samples per problem; it never finishes correctly, so its values are 0), and the
same policy over a scripted sampler with a known mix of right, wrong and missing answers per problem, where
pass@4, pass^4, avg@4 and maj@4 all differ.
"""

import collections
import itertools
import json

import pytest

from reasoner.cli import main
from reasoner.tasks.logic_llm import load_problems
from tests.agents.scripted_sampling import finish, use_script, z3_solve

K = 4
REFUTATION = "(declare-const p Bool)(assert p)(assert (not p))(check-sat)(get-model)"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, tokenizer):
    from reasoner.models.export import export_hf
    from tests.models_shared import TINY, random_decoder

    return export_hf(random_decoder(TINY, seed=1, scale=4.0), str(tmp_path_factory.mktemp("tiny")),
                     tokenizer=tokenizer)


def brute_force(rows: list[dict], k: int) -> dict:
    """Mean over problems of: P(a k-subset has a correct attempt), P(all of it correct), the attempt accuracy, and
    the majority vote of a k-subset (attempts without an answer abstain; a t-way tie holding gold scores 1/t)."""
    by_id = collections.defaultdict(list)
    for row in rows:
        by_id[row["id"]].append(row)
    sums = collections.Counter()
    for attempts in by_id.values():
        subsets = list(itertools.combinations(attempts, k))
        sums["pass"] += sum(any(a["correct"] for a in s) for s in subsets) / len(subsets)
        sums["hat"] += sum(all(a["correct"] for a in s) for s in subsets) / len(subsets)
        sums["avg"] += sum(a["correct"] for a in attempts) / len(attempts)
        votes = 0.0
        for s in subsets:
            counts = collections.Counter(a["answer"] for a in s if a["answer"] is not None)
            if counts:
                top = max(counts.values())
                leaders = [x for x, c in counts.items() if c == top]
                votes += (s[0]["gold"] in leaders) / len(leaders)
        sums["maj"] += votes / len(subsets)
    n = len(by_id)
    return {f"pass@{k}": sums["pass"] / n, f"pass^{k}": sums["hat"] / n, f"avg@{k}": sums["avg"] / n,
            f"maj@{k}": sums["maj"] / n}


def _eval(capsys, tiny_dir, shared_data, samples, *extra):
    code = main(["smt", "eval", "--model", tiny_dir, "--k", str(K), "--dataset", "prontoqa", "--limit", "4",
                 "--data-root", str(shared_data), "--temperature", "1", "--t-max", "2", "--max-len", "2048",
                 "--samples-out", str(samples), "--json", *extra])
    assert code == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    return summary, rows


def _assert_recomputed(summary, rows):
    assert len(rows) == K * summary["problems"] and summary["k"] == K
    want = brute_force(rows, K)
    got = {key: summary[key] for key in want}
    # Each key is a float64 mean over n problems of per-problem values in [0, 1] (rounded the same way in both
    # computations, 1/t included); summing in two different orders differs by at most 2 gamma_n * n <= 2 n u, and
    # the two divisions by n add one rounding each: (2n + 2) u with u = 2**-53 (Higham, Lemma 3.1).
    n = summary["problems"]
    assert got == pytest.approx(want, rel=0, abs=(2 * n + 2) * 2.0 ** -53)
    return got


def test_tiny_random_model_k4_temperature_1(tiny_dir, shared_data, tmp_path, capsys):
    summary, rows = _eval(capsys, tiny_dir, shared_data, tmp_path / "s.jsonl", "--max-new-tokens", "6")
    _assert_recomputed(summary, rows)
    assert [(r["id"], r["sample"]) for r in rows[:K]] == [("ProntoQA_1", s) for s in range(K)]
    assert all(r["completion_tokens"] > 0 for r in rows)
    # sampled, not greedy: the K replies to one prompt differ (each ended the episode as its answer text)
    assert all(len({r["raw_answer"] for r in rows if r["id"] == pid}) > 1 for pid in {r["id"] for r in rows})


def test_scripted_mix_through_the_same_cli_path(tiny_dir, shared_data, tmp_path, capsys, monkeypatch):
    problems = load_problems(shared_data, "prontoqa", limit=4)
    gold = [p.answer for p in problems]
    wrong = ["B" if g == "A" else "A" for g in gold]
    plans = [["right", "z3_right", "right", "right"],   # 4/4 correct, vote gold
             ["right", "wrong", "z3_right", "wrong"],   # 2/4, vote ties 2-2 -> 1/2
             ["wrong", "none", "right", "none"],        # 1/4, two abstain, 1-1 tie -> 1/2
             ["wrong", "wrong", "none", "wrong"]]       # 0/4

    def replies(problem, sample, turn):
        plan = plans[problem][sample]
        if plan == "z3_right" and turn == 0:
            return z3_solve(REFUTATION)
        return {"right": finish(gold[problem]), "z3_right": finish(gold[problem]), "wrong": finish(wrong[problem]),
                "none": "I am not sure."}[plan]

    sessions = use_script(monkeypatch, replies)
    summary, rows = _eval(capsys, tiny_dir, shared_data, tmp_path / "s.jsonl")
    assert len(sessions) == 1 and sessions[0].n == K  # one batch, the K copies of each prompt as one prefill
    got = _assert_recomputed(summary, rows)
    assert got == {"pass@4": 3 / 4, "pass^4": 1 / 4, "avg@4": 7 / 16, "maj@4": 1 / 2}
    assert len(set(got.values())) == 4
    assert summary["vcr_unsat"] == 2 / 16  # the unsat-then-(get-model) calls count as executable
