"""Python functions as tools (`reasoner.agents.tools`, `reasoner.agents.tool_schema`): schemas against transformers' `get_json_schema` (the
reference TRL passes to chat templates), argument checking, and every failure mode as an observation in both the
verifier pool and in-process modes."""

from __future__ import annotations

import json
import os

import pytest
from transformers.utils.chat_template_utils import get_json_schema

from reasoner.agents.tool_calls import parse_tool_calls
from reasoner.agents.tool_schema import check_arguments, function_schema, load_function
from reasoner.agents.tools import Toolset, render_value
from tests.agents import tool_fixtures as fx

FIXTURES = "tests.agents.tool_fixtures"
TIMEOUT_S = 0.5


def call(name, **arguments):
    (parsed,) = parse_tool_calls("<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>")
    return parsed


@pytest.mark.parametrize("fn", [fx.add, fx.boom, fx.nap, fx.forecast, fx.shapes, fx.whoami, fx.submit],
                         ids=lambda f: f.__name__)
def test_schema_equals_transformers_get_json_schema(fn):
    reference = get_json_schema(fn)
    reference["function"].pop("return", None)  # the one deliberate deviation: no "return" in the OpenAI format
    assert function_schema(fn) == reference


def test_schema_details_and_the_lenient_docstring():
    f = function_schema(fx.forecast)["function"]
    props = f["parameters"]["properties"]
    assert f["description"] == "Weather forecast for a city.\n\nA second paragraph that belongs to the description."
    assert props["city"] == {"type": "string", "enum": ["paris", "rome"], "description": "Which city."}
    assert props["days"] == {"type": "integer", "nullable": True, "description": "How many days ahead."}
    assert props["units"]["enum"] == ["metric", "imperial"] and f["parameters"]["required"] == ["city"]
    assert props["weights"]["additionalProperties"] == {"type": "number"}
    assert function_schema(fx.add)["function"]["parameters"]["properties"]["b"]["description"] == \
        "The second addend, zero when left out."
    # transformers refuses a parameter without an Args entry; we leave its description out
    with pytest.raises(Exception, match="no description for the argument"):
        get_json_schema(fx.undocumented)
    assert function_schema(fx.undocumented)["function"]["parameters"] == {
        "type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "string"}}, "required": ["x"]}


class Point:
    pass


def custom(p: Point):
    return p


def test_schema_and_spec_errors_name_the_function_and_parameter():
    def untyped(x):
        return x

    def star(*args: int):
        return args

    for fn, match in ((untyped, "tool untyped, parameter 'x': missing a type hint"),
                      (star, "tool star, parameter 'args': \\*args"),
                      (custom, "tool custom, parameter 'p': type hint .*Point.* has no JSON schema")):
        with pytest.raises(ValueError, match=match):
            function_schema(fn)
    for spec, match in (("nocolon", "expected 'package.module:function'"), ("no_such_mod:f", "cannot import"),
                        (f"{FIXTURES}:missing", "has no 'missing'"),
                        (f"{FIXTURES}:time", "is not callable")):
        with pytest.raises(ValueError, match=match):
            load_function(spec)
    assert load_function(f"{FIXTURES}:add") is fx.add


def test_argument_checking_against_the_schema():
    schema = function_schema(fx.shapes)
    kwargs, why = check_arguments(schema, {"point": [1, 2.5], "grid": [[1, 2.0]], "value": "v", "anything": {"k": 1}})
    assert why is None and kwargs == {"point": (1, 2.5), "grid": [[1, 2]], "value": "v", "anything": {"k": 1}}
    assert type(kwargs["grid"][0][1]) is int  # an integral float for an int hint arrives as an int
    bad = {"missing required argument(s) 'point', 'grid'": {"value": 1, "anything": None},
           "unexpected argument(s) 'zzz'": {"point": [1, 2], "grid": [], "value": 1, "anything": 0, "zzz": 1},
           "'point' must have 2 items, got 3": {"point": [1, 2, 3], "grid": [], "value": 1, "anything": 0},
           "'grid'[0][1] must be of type integer, got 2.5": {"point": [1, 2], "grid": [[1, 2.5]], "value": 1,
                                                                  "anything": 0},
           "'value' must be of type integer or string, got true": {"point": [1, 2], "grid": [], "value": True,
                                                                   "anything": 0},
           "'flag' must be of type boolean, got 1": {"point": [1, 2], "grid": [], "value": 1, "anything": 0, "flag": 1}}
    for match, arguments in bad.items():
        kwargs, why = check_arguments(schema, arguments)
        assert kwargs == {} and why is not None
        assert match in why, (match, why)
    forecast = function_schema(fx.forecast)
    assert check_arguments(forecast, {"city": "paris", "days": None})[1] is None  # nullable
    assert "must be one of [\"paris\", \"rome\"], got \"oslo\"" in check_arguments(forecast, {"city": "oslo"})[1]
    assert "must be a JSON object" in check_arguments(forecast, ["paris"])[1]


def test_render_value():
    assert render_value("text") == "text" and render_value(5) == "5" and render_value({"a": [1, None]}) == \
        '{"a": [1, null]}'
    assert render_value({1, 2}) == "{1, 2}"  # no JSON form: its repr
    assert render_value("x" * 50, max_chars=10) == "x" * 10 + "\n...[truncated]"


@pytest.fixture(scope="module", params=["pool", "inprocess"])
def toolset(request):
    with Toolset([f"{FIXTURES}:{n}" for n in ("add", "boom", "nap", "whoami", "shapes")], mode=request.param,
                 timeout_s=TIMEOUT_S) as tools:
        yield tools


def test_every_failure_is_an_observation(toolset):
    malformed_json = parse_tool_calls('<tool_call>{"name": "add", "arguments": {"a": oops}}</tool_call>')[0]
    string_args = parse_tool_calls('<tool_call>{"name": "add", "arguments": "{a: 1"}</tool_call>')[0]
    cases = [(call("add", a=2, b=3.0), "ok", "5"),
             (call("shapes", point=[1, 2.5], grid=[[1]], value="v", anything=None), "ok",
              '[[1, 2.5], [[1]], "v", null, false]'),
             (call("boom", reason="x"), "error", "error: boom raised ValueError: boom: x"),
             (call("nap", seconds=60), "timeout", f"error: nap did not finish within {TIMEOUT_S:g} s"),
             (call("add", a="x"), "bad_arguments", "error: bad arguments for add: argument 'a' must be of type "
                                                   "integer, got \"x\""),
             (call("add"), "bad_arguments", "error: add is missing required argument(s) 'a'"),
             (call("nope", q=1), "unknown_tool", "error: unknown tool 'nope'; available tools: add, boom, nap, whoami, "
                                                 "shapes"),
             (malformed_json, "malformed", "error: the call of add is not valid JSON: "),
             (string_args, "malformed", "error: the arguments of add are not a JSON object: '{a: 1'")]
    pending = [toolset.submit(c) for c, _, _ in cases]  # all started before any is awaited
    for (c, outcome, content), p in zip(cases, pending):
        obs = p.result()
        assert obs.record["outcome"] == outcome and obs.ok == (outcome == "ok"), (c, obs)
        assert obs.content.startswith(content) if outcome == "malformed" else obs.content == content, obs.content
        assert obs.record["content"] == obs.content and obs.record["arguments"] == c.arguments
    # the toolset goes on after a timeout (pool: the worker was replaced; in-process: the thread was abandoned)
    assert toolset.submit(call("add", a=1)).result().content == "1"


def test_pool_runs_calls_in_a_worker_process_and_inprocess_in_this_one(toolset):
    pid = int(toolset.submit(call("whoami")).result().content)
    if toolset.mode == "inprocess":
        assert pid == os.getpid()
    else:
        assert pid not in (os.getpid(), os.getppid())
        assert toolset.pool.worker_pids()


def test_toolset_construction_errors():
    def local(x: int) -> int:
        """A function defined inside a test: not importable by module path."""
        return x

    with pytest.raises(ValueError, match="cannot be imported in a worker; move it to a module or use mode 'inprocess'"):
        Toolset([local])
    with Toolset([local, fx.add], mode="inprocess") as tools:  # trusted mode takes any function
        assert tools.names == ("local", "add") and tools.submit(call("local", x=4)).result().content == "4"
    with pytest.raises(ValueError, match="two tools are named 'add'"):
        Toolset([fx.add, f"{FIXTURES}:add"])
    with pytest.raises(ValueError, match="tool mode 'thread'"):
        Toolset([fx.add], mode="thread")
    with pytest.raises(ValueError, match="timeout_s=-1"):
        Toolset([fx.add], timeout_s=-1)
    with pytest.raises(ValueError, match="non-empty list"):
        Toolset(f"{FIXTURES}:add")
    tools = Toolset([fx.add])
    assert tools._pool is None  # the pool starts on the first call only
    tools.close()


def test_qwen3_coder_xml_values_take_their_parameters_types():
    """The XML form carries every value as text; like vLLM's qwen3_coder parser, each becomes its parameter's type
    (an integer parameter read "2" and every XML call of a non-string tool failed as bad arguments)."""
    def xml(name, **params):
        body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
        return parse_tool_calls(f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>")[0]

    with Toolset([fx.add, fx.shapes], mode="inprocess", timeout_s=TIMEOUT_S) as tools:
        assert tools.submit(xml("add", a=2, b=3)).result().content == "5"
        shaped = tools.submit(xml("shapes", point="[1, 2.5]", grid="[[1], [2, 3]]", value="7", anything="x y",
                                  flag="True")).result()
        # value: int | str keeps its text; anything (Any) keeps its text; flag: the Python literal True
        assert shaped.content == '[[1, 2.5], [[1], [2, 3]], "7", "x y", true]', shaped.content
        bad = tools.submit(xml("add", a="two")).result()
        assert bad.record["outcome"] == "bad_arguments" and 'got "two"' in bad.content
