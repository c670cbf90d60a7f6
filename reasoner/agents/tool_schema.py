"""The OpenAI tool schema of a Python function, and the check of a model's arguments against it.

`function_schema(fn)` builds what transformers' `get_json_schema` builds for the same function (a test checks it).
Type hints map as str -> string, int -> integer, float -> number, bool -> boolean, None -> null, Any -> {},
list[X] -> array with items, tuple[X, Y] -> array with prefixItems, dict[str, X] -> object with
additionalProperties, Literal[...] -> enum, a union -> a list of types (anyOf when a member carries more than a
type) and Optional[X] / X | None -> nullable; a parameter without a default is required. The description is the
docstring's text before `Args:` / `Returns:` / `Raises:`; each parameter's is its Google-style `Args:` entry
(continuation lines joined by a space; a trailing `(choices: [...])` becomes an enum). Two deliberate deviations:
the return hint is left out (the OpenAI format has no "return" and the model never writes one), and a parameter
without an `Args:` entry gets no description rather than an error. A parameter without a type hint, *args /
**kwargs, and hints with no JSON form (classes, Enum) are errors naming the function and the parameter.

`check_arguments(schema, arguments)` -> (keyword arguments, None) or ({}, why): missing required, unexpected, wrong
type (an integral float is taken as an int, a JSON array as a tuple where the hint is a tuple). `malformed(call)`
says when a parsed call carried no readable JSON; `xml_arguments(schema, arguments)` types a qwen3_coder XML call's
text values as vLLM's parser does. `load_function("package.module:function")` resolves a spec.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import re
import types
import typing
from typing import Any, Callable, Literal, Union

_SECTION = re.compile(r"^\s*(Args|Arguments|Returns|Yields|Raises|Examples?|Notes?):\s*$")
_ARG_LINE = re.compile(r"^(\s*)(\w+)(?:[ \t]*\([^()\n]*\))?:\s*(.*)$")
_CHOICES = re.compile(r"\(choices:\s*(.*?)\)\s*$", re.IGNORECASE)
_SCALARS = {int: "integer", float: "number", str: "string", bool: "boolean", type(None): "null"}


def _type_schema(hint, where: str) -> dict:
    """The JSON schema of one type hint (transformers' `_parse_type_hint` rules)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is None:
        simple = {**{t: {"type": n} for t, n in _SCALARS.items()}, list: {"type": "array"},
                  tuple: {"type": "array"}, dict: {"type": "object"}, Any: {}}
        if isinstance(hint, type) and hint in simple or hint is Any:
            return dict(simple[hint])
        raise ValueError(f"{where}: type hint {hint!r} has no JSON schema; expected str, int, float, bool, None, "
                         "Any, list[...], tuple[...], dict[str, ...], Literal[...] or a union of those")
    if origin is Union or origin is types.UnionType:
        subs = [_type_schema(a, where) for a in args if a is not type(None)]
        if len(subs) == 1:
            out = subs[0]
        elif all(s.keys() == {"type"} and isinstance(s["type"], str) for s in subs):
            names = sorted({s["type"] for s in subs})
            out = {"type": names[0] if len(names) == 1 else names}
        else:
            out = {"anyOf": subs}
        if type(None) in args:
            out["nullable"] = True
        return out
    if origin is Literal:
        if not args or any(type(a) not in _SCALARS for a in args):
            raise ValueError(f"{where}: Literal values must be str, int, float, bool or None, got {args!r}")
        kinds = list(dict.fromkeys(_SCALARS[type(a)] for a in args))
        return {"type": kinds[0] if len(kinds) == 1 else kinds, "enum": list(args)}
    if origin is list:
        return {"type": "array", "items": _type_schema(args[0], where)} if args else {"type": "array"}
    if origin is tuple:
        if len(args) == 1 or ... in args:
            raise ValueError(f"{where}: {hint!r}: expected a fixed tuple of two or more types (use list[X] otherwise)")
        return {"type": "array", "prefixItems": [_type_schema(a, where) for a in args]} if args else {"type": "array"}
    if origin is dict:
        out = {"type": "object"}
        if len(args) == 2:
            out["additionalProperties"] = _type_schema(args[1], where)
        return out
    raise ValueError(f"{where}: type hint {hint!r} has no JSON schema")


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """(description, {parameter: description}) of a Google-style docstring: the text before the first section
    header, and the entries of its `Args:` section (an entry's deeper-indented lines continue it)."""
    lines = doc.strip().splitlines()
    first = next((i for i, line in enumerate(lines) if _SECTION.match(line)), len(lines))
    description = "\n".join(lines[:first]).strip()
    params: dict[str, str] = {}
    start = next((i for i, line in enumerate(lines) if _SECTION.match(line) and line.split(":")[0].strip()
                  in ("Args", "Arguments")), None)
    if start is None:
        return description, params
    base, name = None, None
    for line in lines[start + 1:]:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if _SECTION.match(line) and (base is None or indent < base):
            break
        match = _ARG_LINE.match(line)
        if match and (base is None or indent <= base):
            base, name = indent, match.group(2)
            params[name] = match.group(3).strip()
        elif name is not None:
            params[name] = f"{params[name]} {line.strip()}".strip()
    return description, params


def function_schema(fn: Callable) -> dict:
    """The OpenAI tool schema of `fn`: {"type": "function", "function": {"name", "description", "parameters"}}."""
    name = getattr(fn, "__name__", None)
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"tool {fn!r}: expected a named function")
    try:
        hints = typing.get_type_hints(fn)
        signature = inspect.signature(fn)
    except (TypeError, ValueError, NameError) as err:
        raise ValueError(f"tool {name}: cannot read its signature ({err})") from err
    description, docs = parse_docstring(inspect.getdoc(fn) or "")
    properties, required = {}, []
    for pname, param in signature.parameters.items():
        where = f"tool {name}, parameter {pname!r}"
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ValueError(f"{where}: *args / **kwargs cannot be described to the model; name every parameter")
        if pname not in hints:
            raise ValueError(f"{where}: missing a type hint (the schema is built from it)")
        schema = _type_schema(hints[pname], where)
        text = docs.get(pname)
        if text is not None:
            choices = _CHOICES.search(text)
            if choices:
                try:
                    schema["enum"] = [c.strip() if isinstance(c, str) else c for c in json.loads(choices.group(1))]
                except ValueError as err:
                    raise ValueError(f"{where}: its (choices: ...) is not a JSON list ({err})") from err
                text = text[:choices.start()].strip()
            schema["description"] = text
        properties[pname] = schema
        if param.default is inspect.Parameter.empty:
            required.append(pname)
    parameters = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


def load_function(spec: str) -> Callable:
    """The function a "package.module:function" spec names; ValueError naming the spec when it does not resolve."""
    module_name, colon, attr = spec.partition(":") if isinstance(spec, str) else ("", "", "")
    if not colon or not module_name or not attr:
        raise ValueError(f"tool spec {spec!r}: expected 'package.module:function'")
    try:
        obj = importlib.import_module(module_name)
    except Exception as err:  # noqa: BLE001 - any import failure is the spec's
        raise ValueError(f"tool spec {spec!r}: cannot import {module_name!r} ({type(err).__name__}: {err})") from err
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"tool spec {spec!r}: module {module_name!r} has no {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"tool spec {spec!r}: {attr!r} is not callable")
    return obj


# ============================================================================================== arguments
class _Bad(ValueError):
    pass


def _show(value) -> str:
    text = json.dumps(value) if isinstance(value, (str, int, float, bool, type(None))) else repr(value)
    return (text[:60] + "...") if len(text) > 60 else text


def _kind(schema: dict) -> str:
    if "enum" in schema:
        return "one of " + json.dumps(schema["enum"])
    if "anyOf" in schema:
        return " or ".join(_kind(s) for s in schema["anyOf"])
    kinds = schema.get("type", "anything")
    return "of type " + (" or ".join(kinds) if isinstance(kinds, list) else kinds)


def _conform(value, schema: dict, where: str):
    """`value` as the function should receive it, or _Bad naming `where`, what was expected and what came."""
    if value is None and schema.get("nullable"):
        return None
    if "anyOf" in schema:
        for sub in schema["anyOf"]:
            try:
                return _conform(value, sub, where)
            except _Bad:
                continue
        raise _Bad(f"{where} must be {_kind(schema)}, got {_show(value)}")
    if "enum" in schema:
        for choice in schema["enum"]:
            same_kind = type(value) is type(choice) or (type(value) in (int, float) and type(choice) in (int, float))
            if same_kind and value == choice:
                return choice
        raise _Bad(f"{where} must be {_kind(schema)}, got {_show(value)}")
    kinds = schema.get("type")
    if kinds is None:
        return value
    for kind in kinds if isinstance(kinds, list) else [kinds]:
        if kind == "string" and isinstance(value, str) or kind == "boolean" and isinstance(value, bool):
            return value
        if kind == "null" and value is None:
            return None
        if isinstance(value, bool):
            continue
        if kind == "integer" and (isinstance(value, int) or isinstance(value, float) and value.is_integer()):
            return int(value)
        if kind == "number" and isinstance(value, (int, float)):
            return value
        if kind == "array" and isinstance(value, (list, tuple)):
            if "prefixItems" in schema:
                items = schema["prefixItems"]
                if len(value) != len(items):
                    raise _Bad(f"{where} must have {len(items)} items, got {len(value)}")
                return tuple(_conform(v, s, f"{where}[{i}]") for i, (v, s) in enumerate(zip(value, items)))
            sub = schema.get("items")
            return [_conform(v, sub, f"{where}[{i}]") if sub else v for i, v in enumerate(value)]
        if kind == "object" and isinstance(value, dict):
            sub = schema.get("additionalProperties")
            return {k: _conform(v, sub, f"{where}[{k!r}]") if sub else v for k, v in value.items()}
    raise _Bad(f"{where} must be {_kind(schema)}, got {_show(value)}")


def check_arguments(schema: dict, arguments) -> tuple[dict, str | None]:
    """(keyword arguments for the call, None) or ({}, why they do not fit the tool's `schema`)."""
    fn = schema["function"]
    params = fn["parameters"]
    if not isinstance(arguments, dict):
        return {}, f"arguments of {fn['name']} must be a JSON object, got {_show(arguments)}"
    props = params["properties"]
    missing = [p for p in params.get("required", []) if p not in arguments]
    if missing:
        return {}, f"{fn['name']} is missing required argument(s) {', '.join(map(repr, missing))}"
    extra = sorted(set(arguments) - set(props))
    if extra:
        return {}, (f"{fn['name']} got unexpected argument(s) {', '.join(map(repr, extra))}; "
                    f"its parameters are {', '.join(props) or '(none)'}")
    try:
        return {k: _conform(v, props[k], f"argument {k!r}") for k, v in arguments.items()}, None
    except _Bad as err:
        return {}, f"bad arguments for {fn['name']}: {err}"


def xml_arguments(schema: dict, arguments: dict) -> dict:
    """The arguments of a qwen3_coder XML call (`<parameter=NAME>text</parameter>`: every value is text) as the
    types their parameters declare, as vLLM's qwen3_coder parser converts them: a parameter that takes a string
    (or any value) keeps its text; any other gets the JSON value of its text ("3", "2.5", "true", "null",
    "[1, 2]"), else its Python literal ("True", "{'a': 1}"), else keeps the text (`check_arguments` names it)."""
    props = schema["function"]["parameters"].get("properties", {})
    out = {}
    for key, value in arguments.items():
        spec = props.get(key)
        kinds = spec.get("type", []) if isinstance(spec, dict) else []
        kinds = [kinds] if isinstance(kinds, str) else list(kinds)
        if isinstance(spec, dict) and "anyOf" in spec:
            kinds += [k for sub in spec["anyOf"] if isinstance(sub, dict) for k in
                      ([sub["type"]] if isinstance(sub.get("type"), str) else sub.get("type", []))]
        if not isinstance(value, str) or not kinds or "string" in kinds:
            out[key] = value
            continue
        try:
            out[key] = json.loads(value)
        except ValueError:
            try:
                out[key] = ast.literal_eval(value.strip())
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                out[key] = value
    return out


def malformed(call) -> str | None:
    """Why a parsed `ToolCall` carries no readable arguments, or None: its JSON was only recovered field by field
    (parse mode "fields"), or its "arguments" was a string that is not a JSON object."""
    if call.parse_mode == "fields":
        return f"the call of {call.name} is not valid JSON: {call.raw[:120]!r}"
    try:
        obj = json.loads(call.raw) if call.raw.lstrip().startswith("{") else None
    except ValueError:
        return None
    if isinstance(obj, dict) and isinstance(obj.get("function"), dict):
        obj = obj["function"]
    args = obj.get("arguments") if isinstance(obj, dict) else None
    if isinstance(args, str):
        try:
            if isinstance(json.loads(args), dict):
                return None
        except ValueError:
            pass
        return f"the arguments of {call.name} are not a JSON object: {args[:120]!r}"
    return None
