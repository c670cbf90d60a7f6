"""Property tests: arbitrary input makes the parsers report, never crash with anything but their documented error."""

import json
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from reasoner.data.proofwriter_english import (SentenceError, load_logic_llm, parse_sentence, parse_theory_text,
                                              split_sentences)
from reasoner.data.proofwriter_raw import LoadReport, parse_representation, parse_theory
from search.logic import Atom, Rule

WORDS = st.sampled_from(["If", "if", "something", "someone", "it", "they", "is", "are", "not", "and", "then", "the",
                         "cat", "Bob", "All", "things", "people", "red", "sees", "see", "does", "do", ",", ".",
                         "Every", "a", "tumpus", "Tumpuses", "?", ""])
SENTENCES = st.one_of(st.text(max_size=60), st.lists(WORDS, max_size=12).map(" ".join))


@settings(max_examples=400, deadline=None)
@given(SENTENCES)
def test_sentence_parser_returns_or_raises_sentence_error(text):
    try:
        out = parse_sentence(text)
    except SentenceError as err:
        assert "cannot parse sentence" in str(err)
    else:
        assert isinstance(out, (Atom, Rule))
        if isinstance(out, Atom):
            assert out.is_ground


@settings(max_examples=100, deadline=None)
@given(st.lists(SENTENCES, max_size=6))
def test_theory_parser_reports_each_failure(sentences):
    """Every sentence is accounted for: a failure naming the theory, a rule (named rule1, rule2, ... in order) or a
    fact (duplicates kept once); nothing is dropped silently and nothing is invented."""
    text = " ".join(s.strip().rstrip(".") + "." for s in sentences)
    program, failures = parse_theory_text(text, theory_id="T")
    parsed = []
    for sentence in split_sentences(text):
        try:
            parsed.append(parse_sentence(sentence))
        except SentenceError:
            parsed.append(None)
    assert len(failures) == parsed.count(None) and all(tid == "T" for tid, _ in failures)
    rules = [p for p in parsed if isinstance(p, Rule)]
    assert [(r.premises, r.conclusion) for r in program.rules] == [(r.premises, r.conclusion) for r in rules]
    assert [r.name for r in program.rules] == [f"rule{i + 1}" for i in range(len(rules))]
    assert list(program.axioms) == list(dict.fromkeys(p for p in parsed if isinstance(p, Atom)))


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                    lambda inner: (st.lists(inner, max_size=4)
                                   | st.dictionaries(st.text(max_size=10), inner, max_size=4)),
                    max_leaves=20)
THEORY = st.lists(st.sampled_from(["Bob is red.", "The cat is big.", "If something is red then it is big.",
                                   "All tumpuses are cats.", "Bob sees the cat."]) | SENTENCES, max_size=4
                  ).map(" ".join)
RECORD = st.one_of(JSON, st.fixed_dictionaries({
    "context": THEORY,
    "question": st.sampled_from(["Is it true that Bob is big?", "True or false: the cat is red?", "Bob?"]) | SENTENCES,
    "answer": st.sampled_from(["A", "B", "C", "D", 1, None])}))


@settings(max_examples=100, deadline=None)
@given(JSON)
def test_logic_llm_loader_never_raises(tmp_path_factory, value):
    """Anything but a JSON list is one skip naming the file, no question."""
    path = tmp_path_factory.mktemp("ll") / "x.json"
    path.write_text(json.dumps(value))
    questions, skipped = load_logic_llm(path)
    if not isinstance(value, list):
        assert questions == [] and [sid for sid, _ in skipped] == [str(path)]


@settings(max_examples=100, deadline=None)
@given(st.lists(RECORD, max_size=5))
def test_logic_llm_loader_accounts_for_every_record(tmp_path_factory, records):
    """Each record becomes exactly one of: a question, or one or more skips under its id (real-shaped records with
    parsing and failing theories, statements and answers, and arbitrary JSON items)."""
    records = [dict(r, id=f"r{i}") if isinstance(r, dict) else r for i, r in enumerate(records)]
    path = tmp_path_factory.mktemp("ll") / "x.json"
    path.write_text(json.dumps(records))
    questions, skipped = load_logic_llm(path)
    ids = [r["id"] if isinstance(r, dict) else f"x.json[{i}]" for i, r in enumerate(records)]
    asked, skipped_ids = [q.id for q in questions], {sid for sid, _ in skipped}
    assert len(asked) == len(set(asked)) and not set(asked) & skipped_ids
    assert set(asked) | skipped_ids == set(ids)
    for q in questions:
        program, failures = parse_theory_text(q.context, theory_id=q.id)
        assert failures == [] and q.program == program and q.answer in (True, False, None)


def _write_representation(tree) -> str:
    """A parsed representation written back: lists as "( ... )", "->" bare, every other atom quoted."""
    if isinstance(tree, list):
        return "(" + " ".join(_write_representation(t) for t in tree) + ")"
    return "->" if tree == "->" else f'"{tree}"'


def _nodes(tree) -> int:
    return 1 + sum(_nodes(t) for t in tree) if isinstance(tree, list) else 1


ATOM = st.text(alphabet="abc +~-", max_size=4) | st.just("->")
TREES = st.recursive(ATOM, lambda inner: st.lists(inner, max_size=4), max_leaves=12)
# random text rarely parses, so also well-formed text and well-formed text with one character dropped
REPRESENTATION_TEXT = st.one_of(
    st.text(alphabet='()"->abc +~ ', max_size=40), TREES.map(_write_representation),
    st.tuples(TREES.map(_write_representation), st.integers(min_value=0)).map(lambda t: t[0][:t[1] % len(t[0])]
                                                                                   + t[0][t[1] % len(t[0]) + 1:]))


@settings(max_examples=200, deadline=None)
@given(REPRESENTATION_TEXT)
def test_representation_parser_raises_only_value_error(text):
    """Never anything but the documented ValueError; what parses is one balanced expression that writes back to
    text parsing to the same tree, with at most one node per input character (bounded output)."""
    try:
        tree = parse_representation(text)
    except ValueError as err:
        assert "representation" in str(err)
        return
    unquoted = re.sub(r'"[^"]*"', "", text)
    assert '"' not in unquoted  # every quote was closed
    assert unquoted.count("(") == unquoted.count(")")  # balanced outside quotes
    depth = 0
    for ch in unquoted:  # and never closes more than it opened
        depth += {"(": 1, ")": -1}.get(ch, 0)
        assert depth >= 0
    assert parse_representation(_write_representation(tree)) == tree
    assert _nodes(tree) <= len(text)


@settings(max_examples=200, deadline=None)
@given(TREES)
def test_representation_round_trip_from_trees(tree):
    """Every tree of lists and atoms written as text parses back to itself (the other direction of the round trip)."""
    assert parse_representation(_write_representation(tree)) == tree


@settings(max_examples=100, deadline=None)
@given(REPRESENTATION_TEXT, REPRESENTATION_TEXT)
def test_two_expressions_or_a_stray_paren_are_rejected(first, second):
    """What parses alone, written twice side by side, is two expressions: an error, never a silent pick of one."""
    try:
        tree = parse_representation(first)
    except ValueError:
        return
    written = _write_representation(tree)
    for bad in (written + " " + written, written + ")", "(" + written):
        try:
            parse_representation(bad)
        except ValueError as err:
            assert "representation" in str(err)
        else:
            raise AssertionError(f"{bad!r} parsed")


@settings(max_examples=100, deadline=None)
@given(JSON)
def test_raw_theory_parser_reports_instead_of_raising(value):
    report = LoadReport()
    obj = value if isinstance(value, dict) else {"id": "X", "triples": value}
    theory = parse_theory(obj, report=report)
    # Either a theory comes back, or exactly one skip names this theory's id: nothing is lost silently.
    assert (theory is not None) != (len(report.skipped) == 1)
    if theory is None:
        assert report.skipped[0][0] == str(obj.get("id", "<no id>"))


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["triples", "rules", "questions", "rule1", "Q1", "representation", "answer", "QDep"]), JSON)
def test_corrupted_real_shaped_theory_is_reported_not_raised(where, value):
    from tests.data.test_proofwriter_raw import _owa_theory

    obj = _owa_theory()
    if where in ("triples", "rules", "questions"):
        obj[where] = value
    elif where == "rule1":
        obj["rules"]["rule1"] = value
    elif where == "Q1":
        obj["questions"]["Q1"] = value
    elif where == "representation":
        obj["rules"]["rule2"]["representation"] = value
    else:
        obj["questions"]["Q2"][where] = value
    report = LoadReport()
    theory = parse_theory(obj, report=report)
    assert theory is not None or report.skipped[0][0] == "RelNeg-OWA-D3-7"


# --- parsers of model output (issue 16 item 5): never raise, linear time, properties ---------------------------
from reasoner.agents.tool_calls import ToolCall, parse_tool_calls  # noqa: E402
from reasoner.rewards.code_exec import extract_code  # noqa: E402
from reasoner.rewards.match import MAX_INT_DIGITS, extract_span, integer_tokens, standalone_integers  # noqa: E402
from reasoner.verifiers import smtlib  # noqa: E402
from reasoner.verifiers.sandbox import extract_answer_code  # noqa: E402

TAGGY = st.text(alphabet=list("<>/answerthinkool_cl{}()[]\"':,= \n`fnishz3_solve"), max_size=80)
OLD_SPAN = lambda text: (re.findall(r"<answer>(.*?)</answer>", text, flags=re.DOTALL) or [None])[-1]  # noqa: E731
OLD_FENCE = re.compile(r"```[ \t]*[\w+.-]*[ \t]*\n(.*?)```", re.DOTALL)


@settings(max_examples=300, deadline=None)
@given(TAGGY)
def test_tool_call_parser_never_raises_and_returns_calls(text):
    calls = parse_tool_calls(text)
    assert isinstance(calls, list) and all(isinstance(c, ToolCall) and isinstance(c.arguments, dict) for c in calls)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["z3_solve", "finish"]), st.text(max_size=60), st.text(alphabet=" \n\t", max_size=5))
def test_tool_call_round_trip(name, value, pad):
    key = "smt_code" if name == "z3_solve" else "answer"
    text = f"thinking{pad}<tool_call>{pad}" + json.dumps({"name": name, "arguments": {key: value}}) + f"{pad}</tool_call>"
    (call,) = parse_tool_calls(text)
    assert (call.name, call.arguments, call.parse_mode) == (name, {key: value}, "json")


@settings(max_examples=300, deadline=None)
@given(TAGGY)
def test_extract_span_equals_the_lazy_regex(text):
    assert extract_span(text) == OLD_SPAN(text)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=list("`py \t\nx=1+.-a"), max_size=60))
def test_code_fence_extractor_equals_the_regex(text):
    fenced = OLD_FENCE.search(text)
    assert extract_code(text) == (fenced.group(1) if fenced else text).strip("\n")


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=-10 ** 30, max_value=10 ** 30), st.integers(min_value=1, max_value=6000))
def test_integer_tokens_round_trip_any_length(small, digits):
    huge = int("7" * digits) if digits <= MAX_INT_DIGITS else None
    text = f"first {small}, then {'7' * digits}."
    assert integer_tokens(text) == [str(small), "7" * digits]
    assert standalone_integers(text) == ([small, huge] if huge is not None else [small])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["(declare-const x Int)", "(assert (> x 0))", "(check-sat)", "(get-model)",
                                 '(echo "include")', "; (include \"f\")\n"]), max_size=6),
       st.integers(min_value=0, max_value=6),
       st.sampled_from(['(set-option :regular-output-channel "f")', '(include "f")',
                        '(apply (using-params simplify :smtlib2_log "f"))']))
def test_file_access_found_wherever_it_is_inserted(commands, where, hostile):
    assert smtlib.file_access("".join(commands)) == []
    commands = commands[:where] + [hostile] + commands[where:]
    assert len(smtlib.file_access("".join(commands))) == 1


DEGENERATE = 100_000


def test_crafted_degenerate_inputs_get_their_one_answer():
    """Each input of issue 16 that raised or went quadratic, at 100 KB, with the result it must give."""
    assert parse_tool_calls("finish(" + "(" * DEGENERATE) == []                       # RecursionError before
    assert parse_tool_calls("<tool_call>" + "[" * DEGENERATE + "</tool_call>") == []
    long_arg = parse_tool_calls("finish(" + "B" * DEGENERATE + ")")                   # MemoryError before
    assert [c.arguments for c in long_arg] == [{"answer": "B" * DEGENERATE}]
    spaced = parse_tool_calls('<tool_call>' + " " * DEGENERATE + '{"name": "finish", "arguments": {"answer": "A"}}')
    assert [(c.name, c.arguments) for c in spaced] == [("finish", {"answer": "A"})]
    assert extract_span("<answer>" * DEGENERATE) is None
    assert extract_span("<answer>" * DEGENERATE + "x</answer>") == "<answer>" * (DEGENERATE - 1) + "x"
    assert extract_answer_code("<answer>" * DEGENERATE) == ""  # no complete span: no code (CEDAR's reading)
    assert extract_answer_code("<answer>" * DEGENERATE + "x</answer>") == "<answer>" * (DEGENERATE - 1) + "x"
    assert extract_code("```py\n" * DEGENERATE) == ""
    assert integer_tokens("9" * 5000) == ["9" * 5000]
    nested = "(assert " + "(" * DEGENERATE + "x" + ")" * DEGENERATE + ")"
    assert sum(smtlib.production_counts(nested).values()) == DEGENERATE + 1          # RecursionError before
    assert smtlib.is_trivial(nested)  # no check-sat
    assert smtlib.file_access('(echo "' + "a" * DEGENERATE) == []


def test_trace_parser_on_separator_runs():
    from search.logic import Atom, Program, Rule
    from search.parse import parse_trace
    from search.verbalize import Verbalizer

    program = Program(axioms=(Atom("parent", ("isaac", "jacob")),),
                      rules=(Rule((Atom("parent", ("?x", "?y")),), Atom("ancestor", ("?x", "?y"))),))
    verbalizer = Verbalizer(program, dataset="logic")
    for filler in ("and ", ", ", " : :"):
        text = "Since parent(isaac, jacob) " + filler * (8192 // len(filler)) + "by rule 1, ancestor(isaac, jacob)."
        (step,) = parse_trace(text, verbalizer).steps
        assert step.rule == 0 and step.conclusion == Atom("ancestor", ("isaac", "jacob"))
        assert step.premises[0] == Atom("parent", ("isaac", "jacob"))


def test_trace_parse_cache_is_bounded_by_bytes(monkeypatch):
    from search import parse as parse_module
    from search.logic import Atom, Program, Rule
    from search.parse import parse_trace
    from search.verbalize import Verbalizer

    program = Program(axioms=(Atom("p", ("a",)),), rules=(Rule((Atom("p", ("?x",)),), Atom("q", ("?x",))),))
    verbalizer = Verbalizer(program, dataset="logic")
    monkeypatch.setattr(parse_module, "_CACHE_BYTES", 1 << 20)
    block = "x" * 16_000
    for i in range(2 * parse_module._CACHE_BYTES // len(block)):
        parse_trace(f"{i} {block} rule 1", verbalizer)
    cached = sum(len(k) for k in verbalizer.block_cache if isinstance(k, str))
    assert cached <= parse_module._CACHE_BYTES
