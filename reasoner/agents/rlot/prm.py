"""Process reward models: the reward of the latest step after each non-terminal block.

Interface (`ProcessRewardModel`): `score(questions, steps) -> float32[n]`, the score in [0, 1] of the LAST step of
each of n thoughts (`steps[i]` is the list of step texts of thought i), computed for all n in one batch.

Implementations:
  * `MathShepherdPRM(model, tokenizer)`: the Math-Shepherd protocol over any causal LM we load (the published
    PRM is `peiyi9979/math-shepherd-mistral-7b-prm`). Input: the special tokens the tokenizer puts first (Mistral's
    BOS `<s>`: Math-Shepherd tokenizes with `tokenizer.encode`, which adds them), the problem, a space, then the
    steps joined by newlines as `Step {i}: {text} ки`; at each position holding the step-tag token, the softmax over
    the logits of the two tokens "+" and "-" only; P("+") at the last tag is the reward. When the input exceeds
    `max_len` tokens, the earliest steps are dropped (numbering keeps its offset). One jitted forward per call over
    the padded batch; only the last tag's hidden state is projected onto the vocabulary.
  * `VerifierPRM(check)`: a host verifier of the latest step (`check(question, steps) -> float`), e.g.
    `arithmetic_check`, which recomputes every `expression = value` written in the step (GSM8K-style steps).
  * `AStarStepPRM(problems)`: the A* step verifier on proof steps of logic programs (DeepRD, ProofWriter,
    ProntoQA: `ProofContext.from_theory` reads their English theories).
  * `Z3StepPRM(runner)` (`z3_prm.py`): Z3's verdicts on the SMT-LIB scripts a step writes, through the verifier pool.
  * `OutcomeOnlyPRM()`: 0 after every non-terminal block (only the outcome reward remains).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import math
import operator
import re
from typing import Callable, Protocol, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

STEP_TAG = "ки"


class ProcessRewardModel(Protocol):
    calls: int

    def score(self, questions: Sequence[str], steps: Sequence[Sequence[str]]) -> np.ndarray: ...


class OutcomeOnlyPRM:
    """No process reward: every non-terminal step scores 0."""

    calls = 0

    def score(self, questions, steps) -> np.ndarray:
        return np.zeros((len(questions),), np.float32)


def shepherd_text(question: str, steps: Sequence[str], *, first: int = 0, tag: str = STEP_TAG) -> str:
    """Math-Shepherd's input for steps[first:], numbered from first + 1."""
    body = "\n".join(f"Step {first + i + 1}: {s.strip()} {tag}" for i, s in enumerate(steps[first:]))
    return f"{question} {body}"


@functools.partial(jax.jit, static_argnames=("graphdef",))
def _tag_probability(graphdef, params, tokens_BxT, segment_ids_BxT, tag_pos_B, candidates_2):
    """P(candidates[0]) against candidates[1] from the logits at `tag_pos_B` of each row: float32[B]."""
    model = nnx.merge(graphdef, params)
    B, T = tokens_BxT.shape
    positions = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32)[None], (B, T))
    hidden, _ = model.hidden_states(tokens_BxT, positions_BxT=positions, segment_ids_BxT=segment_ids_BxT)
    at_tag = jnp.take_along_axis(hidden, tag_pos_B[:, None, None], axis=1)
    logits_B2 = model.logits(at_tag)[:, 0][:, candidates_2].astype(jnp.float32)
    return jax.nn.softmax(logits_B2, axis=-1)[:, 0]


class MathShepherdPRM:
    """Math-Shepherd scoring over a `reasoner.models.Decoder` and its tokenizer (see the module docstring)."""

    def __init__(self, model, tokenizer, *, step_tag: str = STEP_TAG, good: str = "+", bad: str = "-",
                 max_len: int = 4096):
        from reasoner.tokenization import encode

        self.graphdef, self.params = nnx.split(model)
        self.tokenizer, self.step_tag, self.max_len = tokenizer, step_tag, int(max_len)
        tag_ids = encode(tokenizer, f" {step_tag}")
        self.tag_id = int(tag_ids[-1])  # Math-Shepherd: tokenizer.encode(step_tag)[-1]
        pair = encode(tokenizer, f"{good} {bad}")
        if len(pair) != 2:
            raise ValueError(f"MathShepherdPRM: {good!r} and {bad!r} must be one token each for this tokenizer; "
                             f"'{good} {bad}' encodes to {pair}")
        self.candidates = np.asarray(pair, np.int32)
        full, plain = list(tokenizer("x")["input_ids"]), encode(tokenizer, "x")
        start = next((k for k in range(len(full)) if full[k:k + len(plain)] == plain), 0)
        self.prefix = full[:start]  # the tokenizer's leading special tokens: [<s>] for Mistral, [] for SmolLM2
        self.calls = 0

    def encode(self, question: str, steps: Sequence[str]) -> list[int]:
        """Token ids (`prefix` first), dropping the earliest steps until the input fits `max_len`."""
        from reasoner.tokenization import encode

        for first in range(max(len(steps), 1)):
            ids = self.prefix + encode(self.tokenizer, shepherd_text(question, steps, first=first, tag=self.step_tag))
            if len(ids) <= self.max_len:
                return ids
        return self.prefix + ids[len(self.prefix):][-(self.max_len - len(self.prefix)):]

    def step_scores(self, question: str, steps: Sequence[str]) -> np.ndarray:
        """P("+") at every tag of one thought (for inspection; `score` computes only the last)."""
        ids = self.encode(question, steps)
        tags = [i for i, t in enumerate(ids) if t == self.tag_id]
        return np.array([self._probabilities([ids], [p])[0] for p in tags], np.float32)

    def _probabilities(self, rows: list[list[int]], tag_pos: list[int]) -> np.ndarray:
        from reasoner.sampling.buckets import bucket_length, right_pad

        n = len(rows)
        B = bucket_length(n, minimum=1)
        rows = rows + [rows[0]] * (B - n)
        tag_pos = tag_pos + [tag_pos[0]] * (B - n)
        tokens, segments, _ = right_pad(rows, length=bucket_length(max(len(r) for r in rows)))
        probs = _tag_probability(self.graphdef, self.params, tokens, segments, np.asarray(tag_pos, np.int32),
                                 self.candidates)
        return np.asarray(probs)[:n]

    def score(self, questions, steps) -> np.ndarray:
        if not len(questions):
            return np.zeros((0,), np.float32)
        rows, positions = [], []
        for q, s in zip(questions, steps):
            ids = self.encode(q, s)
            tags = [i for i, t in enumerate(ids) if t == self.tag_id]
            if not tags:
                raise ValueError(f"MathShepherdPRM: no step tag {self.step_tag!r} (id {self.tag_id}) in the input of "
                                 f"{q[:60]!r}; expected at least one step")
            rows.append(ids)
            positions.append(tags[-1])
        self.calls += 1
        return self._probabilities(rows, positions).astype(np.float32)


class VerifierPRM:
    """A host verifier as a PRM: `check(question, steps) -> float in [0, 1]` for the latest step."""

    def __init__(self, check: Callable[[str, Sequence[str]], float]):
        self.check = check
        self.calls = 0

    def score(self, questions, steps) -> np.ndarray:
        self.calls += 1
        return np.asarray([float(self.check(q, s)) for q, s in zip(questions, steps)], np.float32)


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.USub: operator.neg, ast.UAdd: operator.pos}
# possessive separators: "=" then a run of spaces without a number was quadratic (16,000 spaces: 5.9 s)
_RESULT = re.compile(r"=\s*+\$?\s*+(-?[\d,]*\.?\d+)")
_EXPRESSION_CHARS = frozenset("0123456789.,-+*/x×÷() \t\n")
MAX_EXPRESSION_CHARS = 200  # longer runs before an "=" are not a step's arithmetic (and would cost ast / float)


def _equations(text: str):
    """(expression, value) for each `expr = value` in `text`: the value after the "=", the expression the run of
    arithmetic characters right before it. One pass over the text (a nested regex quantifier here backtracked
    exponentially on a long run of digits without "="); runs over MAX_EXPRESSION_CHARS are skipped."""
    for m in _RESULT.finditer(text):
        start = m.start()
        while start > 0 and text[start - 1] in _EXPRESSION_CHARS and m.start() - start <= MAX_EXPRESSION_CHARS:
            start -= 1
        if m.start() - start <= MAX_EXPRESSION_CHARS and text[start:m.start()].strip():
            yield text[start:m.start()], m.group(1)


def _eval_arithmetic(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return float(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval_arithmetic(node.left), _eval_arithmetic(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval_arithmetic(node.operand))
    raise ValueError("not arithmetic")


def arithmetic_check(question: str, steps: Sequence[str]) -> float:
    """Fraction of the `expr = value` equations in the latest step whose arithmetic holds (1 decimal place of
    slack for rounded results); 0.5 when the step states no equation (nothing to verify: unsure)."""
    text = steps[-1] if steps else ""
    verdicts = []
    for expr, value in _equations(text):
        expr = expr.replace(",", "").replace("×", "*").replace("x", "*").replace("÷", "/").strip()
        if not re.search(r"\d\s*[-+*/]\s*[\d(]", expr):
            continue  # "x = 5" or a bare number: no computation to check
        try:
            got = _eval_arithmetic(ast.parse(expr, mode="eval").body)
            want = float(value.replace(",", ""))
        except (ValueError, SyntaxError, ZeroDivisionError, TypeError, OverflowError, RecursionError, MemoryError):
            continue  # not arithmetic, or numbers past a float: nothing this check can judge
        if math.isfinite(got) and math.isfinite(want):
            verdicts.append(abs(got - want) <= 0.05 + 1e-9 * abs(want))
    return float(np.mean(verdicts)) if verdicts else 0.5


@dataclasses.dataclass(frozen=True)
class ProofContext:
    """A logic program and the verbalizer that reads proof steps against it (what `AStarStepPRM` needs of a
    problem; `reasoner.tasks.astar.AStarProblem` has the same two attributes)."""

    program: object  # search.logic.Program
    verbalizer: object  # search.verbalize.Verbalizer

    @classmethod
    def from_theory(cls, text: str, *, theory_id: str = "") -> "ProofContext":
        """From an English theory in ProofWriter's / ProntoQA's sentence templates (the rules keep their own
        sentences as rule texts, so a step may quote them). Raises ValueError naming the first unparsed sentence."""
        from reasoner.data.proofwriter_english import parse_theory_sentences
        from search.verbalize import Verbalizer

        program, failures, texts = parse_theory_sentences(text, theory_id=theory_id)
        if failures:
            raise ValueError(f"theory {theory_id or text[:40]!r}: {failures[0][1]} ({len(failures)} sentence(s) "
                             f"unparsed); expected ProofWriter/ProntoQA sentence templates")
        return cls(program=program, verbalizer=Verbalizer(program, dataset="proofwriter", rule_texts=texts))


class AStarStepPRM:
    """The A* step verifier as a PRM for proof problems (DeepRD, ProofWriter and ProntoQA theories).

    problems: {question text: an object with `.program` and `.verbalizer`} (`AStarProblem`, `ProofContext`); the
    thought's steps are read as proof blocks with the problem's verbalizer (`search.parse`), verified in order
    against the program's hypergraph (`search.verify`, compiled once per question): the latest step scores 1.0
    when it holds at least one proof block (a paragraph naming a rule) and every block of it is a ground instance
    of a program rule whose premises are axioms or conclusions of earlier valid blocks, 0.0 when a block of it is
    not, and `unverifiable` (default 0.0: a proof task's step should be a checkable inference) when it holds no
    proof block. The goal plays no part: a valid step toward a false or unknown statement is still valid.
    """

    def __init__(self, problems, *, unverifiable: float = 0.0):
        self.problems = dict(problems)
        self.unverifiable = float(unverifiable)
        self._graphs: dict[str, object] = {}
        self.calls = 0

    def _graph(self, question: str):
        if question not in self._graphs:
            from search.hypergraph import compile_program

            if question not in self.problems:
                raise KeyError(f"AStarStepPRM: no logic program for the question starting {question[:60]!r}")
            self._graphs[question] = compile_program(self.problems[question].program)
        return self._graphs[question]

    def score(self, questions, steps) -> np.ndarray:
        from search.parse import parse_trace
        from search.verify import verify_steps

        self.calls += 1
        out = []
        for q, s in zip(questions, steps):
            hg = self._graph(q)
            verbalizer = self.problems[q].verbalizer
            before = len(parse_trace("\n\n".join(s[:-1]), verbalizer).steps)
            parsed = parse_trace("\n\n".join(s), verbalizer).steps
            latest = verify_steps(hg, -1, parsed).valid[before:]
            out.append(self.unverifiable if not latest else 1.0 if all(latest) else 0.0)
        return np.asarray(out, np.float32)
