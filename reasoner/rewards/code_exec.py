"""Code-execution correctness (CEDAR-GRPO Table 8: Crypto and ListFunction) on held-out tests, in the sandbox.

The answer span holds a Python program defining `transform(x)`; optional Markdown fences are removed (the first
fenced block is taken when there is one). `reasoner.verifiers.sandbox.run_transform_tests` runs every held-out
test in its own locked-down process with a 5 s deadline (CEDAR's setting). The completion scores 1.0 only if
every test passes:
  outputs="string"    the result is a str equal to the expected string (Crypto)
  outputs="int_list"  the result is a list of ints (bools and floats rejected) equal to the expected list
                      (ListFunction)
No answer span, or a program that raises or lacks `transform`, scores 0.0. When tests time out and no other
test failed on its output, the completion is a counted timeout (`RewardFailure("timeout")`, reward 0).
Completions of a batch are verified concurrently by `max_workers` threads (the work is in child processes).

Example field `tests`: a list (or its JSON) of {"input": ..., "output": ...} or [input, output] pairs.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
from collections.abc import Mapping

from reasoner.rewards.match import extract_span
from reasoner.rewards.registry import RewardFailure, completion_text, register_reward

OUTPUT_KINDS = ("string", "int_list")


def extract_code(answer: str) -> str:
    r"""The program in an answer: the first fenced block if there is one, else the whole answer.

    The block is the one the regex ```` ```[ \t]*[\w+.-]*[ \t]*\n(.*?)``` ```` finds, located
    with `str.find` in one left-to-right pass (linear in the answer, whatever its fences)."""
    pos, newline = 0, -2
    while True:
        start = answer.find("```", pos)
        if start < 0:
            return answer.strip("\n")
        if -1 < newline < start + 3 or newline == -2:  # one newline search per line: linear overall
            newline = answer.find("\n", start + 3)
        if newline < 0:
            return answer.strip("\n")
        info = answer[start + 3:newline].strip(" \t")
        if all(c.isalnum() or c in "_+.-" for c in info) and " " not in info and "\t" not in info:
            close = answer.find("```", newline + 1)
            if close < 0:
                return answer.strip("\n")  # no closing fence after the first opening one: none after it
            return answer[newline + 1:close].strip("\n")
        pos = start + 1


def outputs_match(got, expected, *, kind: str) -> bool:
    """Table 8's comparison of one returned value with the expected output."""
    if kind == "string":
        return isinstance(got, str) and got == expected
    if kind == "int_list":
        return (isinstance(got, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in got)
                and got == [int(v) for v in expected])
    raise ValueError(f"kind={kind!r}: expected one of {OUTPUT_KINDS}")


def tests_of(example: Mapping) -> list[tuple]:
    """(input, expected) pairs of an example's `tests` field."""
    if "tests" not in example:
        raise KeyError(f"example has no 'tests' field (keys: {sorted(example)})")
    tests = example["tests"]
    if isinstance(tests, (str, bytes)):
        tests = json.loads(tests)
    pairs = [(t["input"], t["output"]) if isinstance(t, Mapping) else (t[0], t[1]) for t in tests]
    if not pairs:
        raise ValueError("example has an empty 'tests' list: a code verifier needs at least one test")
    return pairs


def verify_completion(text: str, example: Mapping, *, kind: str, timeout_s: float = 5.0,
                      span_tag: str | None = "answer", memory_mb: int = 256):
    """1.0 / 0.0 / RewardFailure("timeout") for one completion (see the module docstring)."""
    from reasoner.verifiers.sandbox import SandboxLimits, run_transform_tests

    tests = tests_of(example)
    answer = text if span_tag is None else extract_span(text, span_tag)
    if answer is None or not answer.strip():
        return 0.0
    report = run_transform_tests(extract_code(answer), tests,
                                 limits=SandboxLimits(timeout_s=timeout_s, memory_mb=memory_mb))
    timed_out = [o for o in report.tests if o.error and o.error.startswith("timeout")]
    others_ok = all(
        o.error is None and outputs_match(o.got, expected, kind=kind)
        for o, (_, expected) in zip(report.tests, tests) if o not in timed_out
    )
    if not others_ok:
        return 0.0
    if timed_out:
        return RewardFailure("timeout", f"{len(timed_out)}/{len(tests)} tests: {timed_out[0].error}")
    return 1.0


@register_reward("code_exec")
def code_exec(*, outputs: str = "int_list", timeout_s: float = 5.0, span_tag: str | None = "answer",
              memory_mb: int = 256, max_workers: int = 2):
    """Held-out-test correctness of `transform` for each completion (CEDAR Crypto: "string", ListFunction:
    "int_list")."""
    if outputs not in OUTPUT_KINDS:
        raise ValueError(f"outputs={outputs!r}: expected one of {OUTPUT_KINDS}")
    if timeout_s <= 0 or max_workers < 1:
        raise ValueError(f"timeout_s={timeout_s}, max_workers={max_workers}: expected positive values")

    def reward(completions, *, examples):
        texts = [completion_text(c) for c in completions]
        with cf.ThreadPoolExecutor(max_workers=max_workers) as pool:
            futures = [pool.submit(verify_completion, t, e, kind=outputs, timeout_s=timeout_s, span_tag=span_tag,
                                   memory_mb=memory_mb) for t, e in zip(texts, examples)]
            # A failing completion raises here; the registry then isolates it by re-running one at a time.
            return [f.result() for f in futures]

    return reward
