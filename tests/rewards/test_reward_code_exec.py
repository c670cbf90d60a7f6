"""Code-execution verifier (CEDAR Crypto / ListFunction) through the real sandbox and the reward registry."""

from __future__ import annotations

import pytest

from reasoner.rewards import CompositeReward
from reasoner.rewards.code_exec import extract_code, outputs_match

LIST_TESTS = {"tests": [{"input": [3, 1, 2], "output": [1, 2, 3]}, {"input": [], "output": []},
                        {"input": [5, 5, 0], "output": [0, 5, 5]}]}
CRYPTO_TESTS = {"tests": '[["abc", "bcd"], ["xyz", "yza"]]'}  # JSON string, [input, output] pairs


def answer(code: str, fence: bool = True) -> str:
    body = f"```python\n{code}\n```" if fence else code
    return f"<think>sort it</think><answer>{body}</answer>"


def test_extract_code_and_compare():
    assert extract_code("```python\ndef f():\n    pass\n```\ntrailing") == "def f():\n    pass"
    assert extract_code("def transform(x):\n    return x") == "def transform(x):\n    return x"
    assert outputs_match([1, 2], [1, 2], kind="int_list")
    assert not outputs_match([True, 2], [1, 2], kind="int_list")
    assert not outputs_match([1.0, 2], [1, 2], kind="int_list")
    assert outputs_match("bcd", "bcd", kind="string") and not outputs_match(["bcd"], "bcd", kind="string")


def test_list_function_and_crypto_verdicts():
    list_reward = CompositeReward.from_config([{"name": "code_exec", "options": {"outputs": "int_list"}}])
    completions = [
        answer("def transform(x):\n    return sorted(x)"),
        answer("def transform(x):\n    return sorted(x)", fence=False),
        answer("def transform(x):\n    return x"),  # wrong on two tests
        answer("def transform(x):\n    return [bool(v) for v in sorted(x)]"),  # bools are not ints
        answer("def transform(x):\n    raise ValueError('no')"),
        answer("def other(x):\n    return sorted(x)"),  # no transform
        "def transform(x):\n    return sorted(x)",  # no answer span
    ]
    batch = list_reward(completions, examples=[LIST_TESTS] * len(completions))
    assert batch.total_B.tolist() == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert list_reward.counter_dict()["code_exec"]["errors"] == 0

    crypto = CompositeReward.from_config([{"name": "code_exec", "options": {"outputs": "string"}}])
    shift = "def transform(s):\n    return ''.join(chr((ord(c) - 97 + 1) % 26 + 97) for c in s)"
    batch = crypto([answer(shift), answer("def transform(s):\n    return s")], examples=[CRYPTO_TESTS] * 2)
    assert batch.total_B.tolist() == [1.0, 0.0]


def test_timeouts_are_counted_and_bad_examples_are_errors():
    reward = CompositeReward.from_config([{"name": "code_exec", "options": {"timeout_s": 0.5}}])
    loop = answer("def transform(x):\n    while True:\n        pass")
    batch = reward([loop, answer("def transform(x):\n    return sorted(x)")],
                   examples=[{"tests": [[[2, 1], [1, 2]]]}, {"tests": []}])
    assert batch.total_B.tolist() == [0.0, 0.0]
    counters = reward.counter_dict()["code_exec"]
    assert counters["timeouts"] == 1 and counters["errors"] == 1  # the empty test list is a counted error
    with pytest.raises(ValueError, match="outputs='float'"):
        CompositeReward.from_config([{"name": "code_exec", "options": {"outputs": "float"}}])
