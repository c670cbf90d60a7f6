"""Tool-call parsing: clean Hermes JSON, each repair, qwen3_coder XML, plain-text calls, no call."""

import json

import pytest

from reasoner.agents.tool_calls import parse_tool_calls, read_tool_calls

SMT = "(declare-const p Bool)\n(assert p)\n(check-sat)"


@pytest.mark.parametrize("reply,name,arguments,mode", [
    ('<tool_call>{"name": "z3_solve", "arguments": {"smt_code": "(declare-const p Bool)\\n(assert p)\\n(check-sat)",'
     ' "timeout": 10}}</tool_call>', "z3_solve", {"smt_code": SMT, "timeout": 10}, "json"),
    # raw newlines inside the string and a trailing comma
    ('<tool_call>\n{"name": "z3_solve", "arguments": {"smt_code": "' + SMT + '",}}\n</tool_call>',
     "z3_solve", {"smt_code": SMT}, "lenient"),
    # missing closing brace and closing tag
    ('<tool_call>{"name": "finish", "arguments": {"answer": "B"}', "finish", {"answer": "B"}, "lenient"),
    # Python-style quotes
    ("<tool_call>{'name': 'finish', 'arguments': {'answer': 'A'}}</tool_call>", "finish", {"answer": "A"}, "lenient"),
    # unescaped quotes inside the SMT code: only field recovery works
    ('<tool_call>{"name": "z3_solve", "arguments": {"smt_code": "(echo "hi")(check-sat)", "timeout": 5}}</tool_call>',
     "z3_solve", {"smt_code": '(echo "hi")(check-sat)', "timeout": "5"}, "fields"),
    ("<tool_call>\n<function=z3_solve>\n<parameter=smt_code>\n(check-sat)\n</parameter>\n"
     "<parameter=timeout>\n10\n</parameter>\n</function>\n</tool_call>",
     "z3_solve", {"smt_code": "(check-sat)", "timeout": "10"}, "xml"),
    ('Let me check. z3_solve(smt_code="(declare-const p Bool)(check-sat)", timeout=5)',
     "z3_solve", {"smt_code": "(declare-const p Bool)(check-sat)", "timeout": 5}, "text"),
    ('z3_solve(smt_code="""(assert (> x (+ 1 2)))\n(check-sat)""")', "z3_solve",
     {"smt_code": "(assert (> x (+ 1 2)))\n(check-sat)"}, "text"),
    ('So the answer is false. finish("B")', "finish", {"answer": "B"}, "text"),
    ("finish(answer=C)", "finish", {"answer": "C"}, "text"),
    ('Calling {"name": "finish", "arguments": {"answer": "A"}}', "finish", {"answer": "A"}, "text"),
])
def test_one_call(reply, name, arguments, mode):
    (call,) = parse_tool_calls(reply)
    assert (call.name, call.arguments, call.parse_mode) == (name, arguments, mode)


def test_several_calls_in_order():
    reply = ('<tool_call>{"name": "z3_solve", "arguments": {"smt_code": "(check-sat)"}}</tool_call>\n'
             '<tool_call>{"name": "finish", "arguments": {"answer": "A"}}</tool_call>')
    assert [c.name for c in parse_tool_calls(reply)] == ["z3_solve", "finish"]


@pytest.mark.parametrize("reply", ["The answer is B.", "I think z3 would say unsat", "<tool_call></tool_call>",
                                   "<tool_call>not json at all</tool_call>", ""])
def test_no_call(reply):
    assert parse_tool_calls(reply) == []


@pytest.mark.parametrize("reply,unreadable", [
    ("The answer is B.", []), ("<tool_call></tool_call>", ["the <tool_call> tag is empty"]),
    ("<tool_call>not json at all</tool_call>", ["not valid JSON (Expecting value at line 1 column 1)"]),
    ('<tool_call>{"arguments": {"x": 1}}</tool_call>', ['no "name" string (keys: [\'arguments\'])']),
    ("<tool_call>[1, 2]</tool_call>", ["a JSON list, not an object"]),
    ("<tool_call><function=z3 solve><parameter=smt_code>x</parameter></function></tool_call>",
     ["<function=NAME> call has no readable NAME"]),
    # the plain-text fallback read the call out of the tag: nothing to report
    ('<tool_call>finish(answer="B")</tool_call>', []),
    ('<tool_call>{"name": "finish", "arguments": {"answer": "A"}}</tool_call><tool_call>oops</tool_call>',
     ["not valid JSON"]),
])
def test_read_tool_calls_reports_what_no_call_came_from(reply, unreadable):
    calls, bad = read_tool_calls(reply)
    assert calls == parse_tool_calls(reply) and len(bad) == len(unreadable)
    assert all(want in b.why and b.why.endswith("</tool_call>") for want, b in zip(unreadable, bad))


def test_parser_never_raises_on_arbitrary_text():
    from hypothesis import given, settings, strategies as st

    alphabet = st.sampled_from(list('<>{}()[]"\',:=\n \\') + ["<tool_call>", "</tool_call>", "z3_solve", "finish",
                                                              '"name"', '"arguments"', "<function=", "<parameter=",
                                                              "```json", "{1, 2}", 'b"x"', "1j", "true"])

    @settings(max_examples=100, deadline=None)
    @given(st.lists(alphabet, max_size=40).map("".join))
    def check(text):
        assert all(isinstance(b.why, str) for b in read_tool_calls(text)[1])
        for call in parse_tool_calls(text):
            assert isinstance(call.name, str) and isinstance(call.arguments, dict)
            json.dumps(call.arguments)  # written to the trajectory rows

    check()


@pytest.mark.parametrize("reply,want", [
    # a call whose closing tag is missing, then the next call: two calls (the first swallowed the second, and its
    # smt_code became '(check-sat)"}}\n<tool_call>{"name": "finish')
    ('<tool_call>{"name": "z3_solve", "arguments": {"smt_code": "(check-sat)"}}\n'
     '<tool_call>{"name": "finish", "arguments": {"answer": "A"}}</tool_call>',
     [("z3_solve", {"smt_code": "(check-sat)"}), ("finish", {"answer": "A"})]),
    # ... but a <tool_call> quoted inside a closed call's string is text (the body was cut there: smt_code '; ')
    ('<tool_call>{"name": "z3_solve", "arguments": {"smt_code": "; <tool_call> is text"}}</tool_call>',
     [("z3_solve", {"smt_code": "; <tool_call> is text"})]),
    # the repair of a missing brace leaves `, ]` inside a string alone (it read 'A]')
    ('<tool_call>{"name": "finish", "arguments": {"answer": "A, ]"}', [("finish", {"answer": "A, ]"})]),
    # a `}` inside the SMT string is not a closing brace: the missing one is added (it was only field-recovered)
    ('<tool_call>{"name": "z3_solve", "arguments": {"smt_code": "(assert (= s \\"}\\"))"}</tool_call>',
     [("z3_solve", {"smt_code": '(assert (= s "}"))'})]),
    # an unterminated string is closed
    ('<tool_call>{"name": "finish", "arguments": {"answer": "B', [("finish", {"answer": "B"})]),
    # text after the object inside the tag, two objects in one tag, a list of calls
    ('<tool_call>{"name": "finish", "arguments": {"answer": "A"}}\nI am done.</tool_call>', [("finish", {"answer": "A"})]),
    ('<tool_call>{"name": "z3_solve", "arguments": {"smt_code": "x"}}\n{"name": "finish", "arguments": {"answer": "C"}}'
     '</tool_call>', [("z3_solve", {"smt_code": "x"}), ("finish", {"answer": "C"})]),
    ('<tool_call>[{"name": "finish", "arguments": {"answer": "D"}}]</tool_call>', [("finish", {"answer": "D"})]),
    # a Markdown code fence around the object
    ('<tool_call>\n```json\n{"name": "finish", "arguments": {"answer": "E"}}\n```\n</tool_call>',
     [("finish", {"answer": "E"})]),
    ('<tool_call>```{"name": "finish", "arguments": {"answer": "F"}}```</tool_call>', [("finish", {"answer": "F"})]),
    # Python-style literals: the words inside strings stay (it read 'None hypothesis')
    ("<tool_call>{'name': 'finish', 'arguments': {'answer': 'null hypothesis', 'x': true}}</tool_call>",
     [("finish", {"answer": "null hypothesis", "x": True})]),
])
def test_repairs_stay_outside_strings_and_each_call_is_found(reply, want):
    calls = parse_tool_calls(reply)
    assert [(c.name, c.arguments) for c in calls] == want
    assert all(c.parse_mode != "fields" for c in calls)  # a Toolset refuses field-recovered calls as malformed


@pytest.mark.parametrize("reply,arguments", [
    ("finish(answer={1, 2})", {"answer": [1, 2]}),
    ('finish(answer=b"B")', {"answer": "b'B'"}),
    ('z3_solve(smt_code="x", timeout=(1, 2j))', {"smt_code": "x", "timeout": [1, "2j"]}),
    ("<tool_call>{'name': 'finish', 'arguments': {'answer': {'A'}, (1, 2): 'x'}}</tool_call>",
     {"answer": ["A"], "(1, 2)": "x"}),
])
def test_python_literals_become_json_values(reply, arguments):
    """Arguments written as Python literals are JSON values: a set in a finish answer crashed the batch of episodes
    (TypeError: Object of type set is not JSON serializable) and could not be written to the trajectory rows."""
    import json

    from reasoner.agents.policies import ScriptedPolicy
    from reasoner.agents.scratchpad import run_scratchpad

    (call,) = parse_tool_calls(reply)
    assert call.arguments == arguments and json.loads(json.dumps(call.arguments)) == arguments
    if call.name == "finish":
        (traj,) = run_scratchpad(ScriptedPolicy({"q": [reply]}), [("p", [{"role": "user", "content": "q"}])],
                                 runner=None)
        answer = arguments["answer"]
        assert (traj.termination, traj.answer) == ("finish", answer if isinstance(answer, str) else json.dumps(answer))
        json.dumps(traj.to_dict())
