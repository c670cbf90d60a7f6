"""Score parsing as the authors' code does it, block reply parsers, and the process reward models."""

import numpy as np
import pytest

from reasoner.agents.rlot import prompts as P
from reasoner.agents.rlot.prm import MathShepherdPRM, OutcomeOnlyPRM, VerifierPRM, arithmetic_check, shepherd_text
from tests.tolerances import formula_atol, logits_atol


def test_scores_parse_in_key_order_with_missing_keys_zero():
    reply = ("A1 score=[3] reason=[fine]\nA2: 2\nA3 score = [1] reason=[bad]\nB1 score=[0] reason=[n/a]\n"
             "C2 score=[3] reason=[ok]")
    scores, parsed = P.parse_scores(reply)
    np.testing.assert_array_equal(scores, [3, 2, 1, 0, 0, 0, 3])  # B2, C1 missing -> 0
    assert parsed and scores.dtype == np.float32


def test_unparseable_reply_is_the_zero_state():
    scores, parsed = P.parse_scores("I think the step is good.")
    assert not parsed and not scores.any()
    # the authors' pattern skips letters, spaces, ':', '=', '[' but not other digits: "A1 (7)" finds nothing
    assert P.parse_scores("A1 (7) score")[0][0] == 0
    assert P.parse_scores("A1\n score=\n[2]")[0][0] == 2


def test_block_reply_parsers():
    assert P.parse_subtasks("### Subtask1: find x\n### Subtask2: find y\n### Subtask3: add", limit=2) == [
        "find x", "find y"]
    assert P.parse_subtasks("just do it", limit=5) == ["just do it"]
    assert P.parse_plans("### Plan1: a\n### Plan2: b\n### Plan3: c\n### Plan4: d") == ["a", "b", "c"]
    assert P.parse_best_plan("The most promising plan is Plan[2]: shorter", 3) == 1
    assert P.parse_best_plan("The most promising plan is Plan3: x", 3) == 2
    assert P.parse_best_plan("Plan 2 seems best", 3) == 0  # format not followed: plan 1
    assert P.parse_best_plan("The most promising plan is Plan9: x", 3) == 0
    assert P.parse_best_plan("The most promising plan is Plan" + "1" * 5000, 3) == 0  # raised past 4,300 digits
    assert P.says_finished("Yes, it was given.") and not P.says_finished("No.")
    prefix = P.thought_prefix("Q?", ["first", "second"])
    assert prefix.startswith("Here is a problem and several reasoning steps.") and "Step 2: second" in prefix


def test_arithmetic_verifier():
    assert arithmetic_check("q", ["She has 16 - 3 - 4 = 9 eggs and earns 9 * 2 = 18 dollars."]) == 1.0
    assert arithmetic_check("q", ["So 3 + 4 = 8."]) == 0.0
    assert arithmetic_check("q", ["2 + 2 = 4 and 10 / 4 = 2.5 and 3 x 3 = 10"]) == pytest.approx(2 / 3)
    assert arithmetic_check("q", ["Let x = 5 be the count."]) == 0.5  # nothing computed: unsure
    assert arithmetic_check("q", ["2 + 3 = 5 + 1 = 7"]) == 0.5  # each "=" checks the run right before it
    # degenerate model output: a run of digits took exponential time (24 digits ~5 s, doubling per digit), a
    # number past a float or a 3000-term sum raised; now linear and unsure
    for step in ["Pi is " + "3" * 5000 + "!", "1" + "0" * 400 + " + 1 = 5", "+".join(["1"] * 3000) + " = 3000"]:
        assert arithmetic_check("q", [step]) == 0.5
    prm = VerifierPRM(arithmetic_check)
    np.testing.assert_array_equal(prm.score(["a", "b"], [["1 + 1 = 2"], ["1 + 1 = 3"]]), [1.0, 0.0])
    assert prm.calls == 1
    np.testing.assert_array_equal(OutcomeOnlyPRM().score(["a"], [["x"]]), [0.0])


def test_math_shepherd_scores_equal_the_plain_forward(tiny_model, tokenizer):
    prm = MathShepherdPRM(tiny_model, tokenizer, max_len=256)
    questions = ["What is 2 + 3?", "Tom has 4 apples and eats one. How many are left?"]
    steps = [["2 + 3 = 5", "The answer is 5"], ["4 - 1 = 3"]]
    got = prm.score(questions, steps)
    assert got.shape == (2,) and prm.calls == 1
    for q, s, g in zip(questions, steps, got):
        ids = prm.encode(q, s)
        assert shepherd_text(q, s).endswith(f"Step {len(s)}: {s[-1]} ки")
        tag = max(i for i, t in enumerate(ids) if t == prm.tag_id)
        logits = np.asarray(tiny_model(np.asarray([ids], np.int32),
                                       positions_BxT=np.arange(len(ids), dtype=np.int32)[None])[0][0, tag])
        pair = logits[prm.candidates].astype(np.float64)
        want = 1.0 / (1.0 + np.exp(pair[1] - pair[0]))
        # The padded batch (at most max_len long) and the plain forward are two float32 evaluations of the same
        # logits: within `logits_atol` each, so their difference l0 - l1 within twice that; P = sigmoid(l0 - l1)
        # has slope <= 1/4, and the PRM's two-way softmax rounds a few times more (max, exp, sum of 2, divide).
        tol = 0.5 * logits_atol(logits, tiny_model.cfg, seq_len=prm.max_len) + formula_atol(1.0, ops=4, terms=2)
        assert abs(float(g) - want) <= tol, (g, want, tol)
    # one tag per step, and the last one is what `score` returns
    per_step = prm.step_scores(questions[0], steps[0])
    assert per_step.shape == (2,) and abs(per_step[-1] - got[0]) <= tol  # the same two logits, another batch


def test_math_shepherd_drops_earliest_steps_when_too_long(tiny_model, tokenizer):
    prm = MathShepherdPRM(tiny_model, tokenizer, max_len=64)
    steps = [f"step number {k} says {k} + {k} = {2 * k}" for k in range(12)]
    ids = prm.encode("Q?", steps)
    assert len(ids) <= 64
    text = tokenizer.decode(ids)
    assert "Step 12:" in text and "Step 1:" not in text  # numbering keeps its offset
    with pytest.raises(ValueError, match="one token each"):
        MathShepherdPRM(tiny_model, tokenizer, good="qz7+", bad="wx9-")


def test_astar_step_prm_accepts_a_proof_step_by_step_and_rejects_a_broken_step():
    from reasoner.agents.rlot.prm import AStarStepPRM
    from reasoner.data.astar_traces import deeprd_records
    from reasoner.data.deeprd import DeepRDSpec
    from reasoner.tasks.astar import problem_from_record, sft_completion

    spec = DeepRDSpec(lookahead=(2, 3), branches=(2, 2), extra_ratio=0.0, max_degree=3)
    problems = [problem_from_record(r) for r in deeprd_records(seed=0, split="test", size=3, spec=spec)]
    questions = [p.verbalizer.context(p.goal) for p in problems]
    prm = AStarStepPRM(dict(zip(questions, problems)))
    for q, p in zip(questions, problems):
        blocks = [b for b in sft_completion(p).split("\n\n") if b.strip()]
        assert len(blocks) >= 2
        scores = [prm.score([q], [blocks[:k + 1]])[0] for k in range(len(blocks))]
        assert scores == [1.0] * len(blocks)  # every A* push is a valid step given the earlier ones
        # the goal's step alone (lookahead >= 2: its premise is derived, not a fact) is not verifiable
        assert prm.score([q], [blocks[-1:]])[0] == 0.0
        assert prm.score([q], [blocks[:1] + ["Since nothing holds, everything follows."]])[0] == 0.0
    with pytest.raises(KeyError, match="no logic program"):
        prm.score(["unknown question"], [["step"]])


def test_math_shepherd_input_starts_with_the_tokenizers_bos(tiny_model, tokenizer):
    """Math-Shepherd scores `tokenizer.encode(f"{question} {output}")`, which puts Mistral's BOS `<s>` first (its
    README drops that BOS from `encode("+ -")` with `[1:]`); the PRM's input had no BOS, so the published Mistral PRM
    scored text it was never trained on. Here SmolLM2's tokenizer made to add a BOS (id 0) as Mistral's does."""
    import copy

    from tokenizers import processors

    bos_tokenizer = copy.deepcopy(tokenizer)
    bos_tokenizer._tokenizer.post_processor = processors.TemplateProcessing(
        single="<|endoftext|> $A", special_tokens=[("<|endoftext|>", 0)])
    q, s = "What is 2 + 3?", ["2 + 3 = 5", "The answer is 5"]
    prm = MathShepherdPRM(tiny_model, bos_tokenizer, max_len=256)
    ids = prm.encode(q, s)
    assert ids == list(bos_tokenizer(shepherd_text(q, s))["input_ids"]) and ids[0] == 0  # Math-Shepherd's encode
    assert MathShepherdPRM(tiny_model, tokenizer).prefix == []  # SmolLM2 adds none: its input is unchanged
    tag = max(i for i, t in enumerate(ids) if t == prm.tag_id)

    def plain(row):
        logits = np.asarray(tiny_model(np.asarray([row], np.int32),
                                       positions_BxT=np.arange(len(row), dtype=np.int32)[None])[0][0, -1])
        pair = logits[prm.candidates].astype(np.float64)
        return 1.0 / (1.0 + np.exp(pair[1] - pair[0])), logits

    want, logits = plain(ids[:tag + 1])
    without_bos, _ = plain(ids[1:tag + 1])
    # as in test_math_shepherd_scores_equal_the_plain_forward: two float32 evaluations of the same two logits
    tol = 0.5 * logits_atol(logits, tiny_model.cfg, seq_len=prm.max_len) + formula_atol(1.0, ops=4, terms=2)
    got = float(prm.score([q], [s])[0])
    assert abs(got - want) <= tol < abs(without_bos - want), (got, want, without_bos, tol)  # BOS moves the score
    # dropping the earliest steps keeps the BOS first
    short = MathShepherdPRM(tiny_model, bos_tokenizer, max_len=64)
    long_ids = short.encode("Q?", [f"step number {k} says {k} + {k} = {2 * k}" for k in range(12)])
    assert len(long_ids) <= 64 and long_ids[0] == 0 and "Step 12:" in bos_tokenizer.decode(long_ids[1:])
    assert len(short.encode("Q?", ["word " * 200])) == 64 and short.encode("Q?", ["word " * 200])[0] == 0
