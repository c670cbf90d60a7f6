"""CEDAR Table 8 verifiers: exact (normalised), label (uppercase), integer and set match."""

from __future__ import annotations

from reasoner.rewards import build_reward
from reasoner.rewards.match import extract_span, standalone_integers


def run(name, completions, golds, **options):
    fn = build_reward(name, **options)
    return fn(completions, examples=[{"answer": g} for g in golds])


def test_answer_span_and_integers():
    assert extract_span("<answer>a</answer> then <answer> b </answer>") == " b "
    assert extract_span("<answer>unterminated") is None
    assert extract_span("<think>x</think>", "think") == "x"
    assert standalone_integers("sent3, 12 and (7); s4 x9 2.5 10.") == [12, 7, 10]
    assert standalone_integers("1-3, -2") == [1, 3, -2]


def test_exact_match_abductionrules_normalisation():
    got = run("exact_match", ["<answer>  The  Cat\nis RED </answer>", "<answer>the cat is red.</answer>",
                              "the cat is red", "<think>the cat is red</think>"], ["the cat is red"] * 4)
    assert got == [1.0, 0.0, 0.0, 0.0]  # punctuation matters; no span -> 0
    assert run("exact_match", ["the cat is red"], ["The Cat is red"], span_tag=None) == [1.0]


def test_label_match_uppercase():
    got = run("exact_match",
              ["<answer> supports</answer>", "<answer>REFUTES</answer>", "<answer>not enough info</answer>"],
              ["SUPPORTS", "SUPPORTS", "NOT ENOUGH INFO"], normalize="upper")
    assert got == [1.0, 0.0, 1.0]
    assert run("exact_match", ["<answer>not  enough info</answer>"], ["NOT ENOUGH INFO"], normalize="upper") == [0.0]


def test_integer_match_balanced_copa():
    got = run("integer_match", ["<answer>2</answer>", "<answer>Option 1</answer>", "<answer>two</answer>",
                                "<answer>2.5</answer>", "2"], [2, 1, 2, 2, 2])
    assert got == [1.0, 1.0, 0.0, 0.0, 0.0]


def test_set_match_uniadilr():
    completions = ["<answer>sentences 3, 1 and 3</answer>", "<answer>1, 3, 4</answer>", "<answer>none</answer>",
                   "<answer>[1, 3]</answer>"]
    assert run("set_match", completions, [[1, 3], [1, 3], [1, 3], "1 3"]) == [1.0, 0.0, 0.0, 1.0]
    assert run("set_match", ["<answer></answer>"], [[]]) == [0.0]  # an empty gold set never matches
