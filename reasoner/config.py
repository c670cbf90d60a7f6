"""Experiment configs: Python files exposing `get_config(variant)`, plus `--config.a.b=v` overrides.

A config spec is `path/to/file.py` or `path/to/file.py:variant` (big_vision style). The file
returns an `ml_collections.ConfigDict`; `load_config` imports it, calls `get_config(variant)`
(variant `None` when the spec names none) and applies overrides. An override of a key that does
not exist raises `ConfigKeyError` listing the nearest existing keys, so a typo never silently
creates a new, ignored setting.
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import pathlib
from typing import Any, Iterable, Sequence

import ml_collections

OVERRIDE_PREFIX = "--config."


class ConfigKeyError(KeyError):
    """An override named a key the config does not have."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0])


def split_spec(spec: str) -> tuple[pathlib.Path, str | None]:
    """'configs/sft.py:tiny' -> (Path('configs/sft.py'), 'tiny'); no colon -> variant None."""
    path, _, variant = str(spec).partition(":")
    return pathlib.Path(path), (variant or None)


def load_config(spec: str, overrides: Sequence[str] = ()) -> ml_collections.ConfigDict:
    """Imports the config file of `spec`, builds its variant and applies `overrides` ('a.b=v' or '--config.a.b=v')."""
    path, variant = split_spec(spec)
    if not path.is_file():
        raise FileNotFoundError(f"config file {path} does not exist (spec {spec!r}; expected path.py[:variant])")
    module_spec = importlib.util.spec_from_file_location(f"_reasoner_config_{path.stem}", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    if not hasattr(module, "get_config"):
        raise AttributeError(f"config file {path}: expected a function get_config(variant)")
    config = module.get_config(variant)
    if not isinstance(config, ml_collections.ConfigDict):
        raise TypeError(f"config file {path}: get_config returned {type(config).__name__}; expected ConfigDict")
    config = ml_collections.ConfigDict(config.to_dict())  # unlocked deep copy we own
    apply_overrides(config, overrides)
    return config


def flat_keys(config: ml_collections.ConfigDict, prefix: str = "") -> list[str]:
    """All dotted leaf and section keys of `config`, e.g. ['train', 'train.lr', ...]."""
    keys = []
    for key, value in config.items():
        dotted = f"{prefix}{key}"
        keys.append(dotted)
        if isinstance(value, ml_collections.ConfigDict):
            keys.extend(flat_keys(value, dotted + "."))
    return keys


def parse_value(text: str) -> Any:
    """'3' -> 3, '2e-5' -> 2e-05, 'true' -> True, '[1,2]' -> [1, 2], 'None' -> None, anything else -> the string."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _kind(value: Any) -> str:
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(
        type(value), "a list like [a, b]" if isinstance(value, (list, tuple)) else type(value).__name__)


def _coerce(key: str, old: Any, new: Any) -> Any:
    """`new` as the type of the existing value `old`, where the conversion is lossless; else ValueError naming both.

    int -> float; an integral float -> int (`8.0` for an int key); list -> tuple; numbers -> str for a string key.
    A fractional number for an integer key (`batch_size=2.5`), a list for a number, a number for a list, or a value
    for a whole section are errors. An old value of None takes anything (the config does not say what it wants).
    """
    if old is None or new is None:
        return new
    wrong = ValueError(f"--config.{key}={new!r}: expected {_kind(old)} (the config's value is {old!r})")
    if isinstance(old, ml_collections.ConfigDict):
        raise ValueError(f"--config.{key}={new!r}: {key!r} is a section; set one of its keys "
                         f"({', '.join(sorted(old.keys())[:6])}...)")
    if isinstance(old, bool):
        if not isinstance(new, bool):
            raise ValueError(f"--config.{key}={new!r}: expected true or false")
        return new
    if isinstance(old, int):
        if isinstance(new, float) and new.is_integer():
            return int(new)
        if isinstance(new, bool) or not isinstance(new, int):
            raise wrong
        return new
    if isinstance(old, float):
        if isinstance(new, bool) or not isinstance(new, (int, float)):
            raise wrong
        return float(new)
    if isinstance(old, (tuple, list)):
        if not isinstance(new, (list, tuple)):
            raise wrong
        return tuple(new) if isinstance(old, tuple) else list(new)
    if isinstance(old, str) and not isinstance(new, str):
        if isinstance(new, (list, tuple, dict)):
            raise wrong
        return str(new)
    return new


def apply_overrides(config: ml_collections.ConfigDict, overrides: Iterable[str]) -> ml_collections.ConfigDict:
    """Sets each 'a.b=v' on `config` in place; unknown keys raise `ConfigKeyError` with near matches."""
    for raw in overrides:
        text = raw[len(OVERRIDE_PREFIX):] if raw.startswith(OVERRIDE_PREFIX) else raw
        key, eq, value_text = text.partition("=")
        if not eq or not key:
            raise ValueError(f"override {raw!r}: expected --config.KEY=VALUE")
        parts = key.split(".")
        node = config
        for i, part in enumerate(parts):
            is_last = i == len(parts) - 1
            if not isinstance(node, ml_collections.ConfigDict) or part not in node:
                known = flat_keys(config)
                near = difflib.get_close_matches(key, known, n=5, cutoff=0.5)
                hint = f"; did you mean {', '.join(near)}?" if near else f"; known top-level keys: {sorted(config.keys())}"
                raise ConfigKeyError(f"config has no key {key!r} (override {raw!r}){hint}")
            if is_last:
                node[part] = _coerce(key, node[part], parse_value(value_text))
            else:
                node = node[part]
    return config


def split_overrides(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Separates '--config.x=y' items (also '--config.x y') from the other command-line arguments. An override
    without a value (at the end, or followed by another `--option`) is an error naming it: taking the next
    option as its value swallowed e.g. `--workdir` and blamed that instead."""
    overrides, rest = [], []
    argv = list(argv)
    i = 0
    while i < len(argv):
        item = argv[i]
        if item.startswith(OVERRIDE_PREFIX):
            if "=" not in item:
                if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
                    raise ValueError(f"override {item}: expected {item}=VALUE (or {item} VALUE)")
                item = f"{item}={argv[i + 1]}"
                i += 1
            overrides.append(item)
        else:
            rest.append(item)
        i += 1
    return overrides, rest
