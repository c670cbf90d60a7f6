"""Any Python function as a multi-turn tool: an OpenAI tool schema from its signature and docstring
(`reasoner.agents.tool_schema`), calls under a deadline in the verifier pool (sandboxed) or in-process (trusted),
and every failure an observation, never an error.

    tools = Toolset(["mypkg.tools:search", "mypkg.tools:calculate"], mode="pool", timeout_s=10.0)
    tools.schemas              # [{"type": "function", "function": {"name", "description", "parameters"}}, ...]
    pending = tools.submit(call)   # call: a `reasoner.agents.tool_calls.ToolCall`; returns at once, never raises
    pending.result()               # Observation(content=<the tool message's text>, record={...}, ok=...)
    tools.close()                  # stops the pool it started

Calls: the arguments are checked against the schema first (`tool_schema.check_arguments`; a qwen3_coder XML
call's text values typed first, `tool_schema.xml_arguments`). Then
  * mode "pool" (default): `reasoner.verifiers.pool.VerifierPool` runs the function as its "module:function" target
    in a clean worker process, jailed like the pool's Z3 workers where `unshare` works (isolate "auto": no network,
    no fork/exec, read-only filesystem); past `timeout_s` the worker is killed and replaced, and `memory_mb` caps
    its memory. The function must be importable in the worker: not defined in `__main__` nor inside another
    function, its module free of JAX. Arguments and results cross a pipe, so results must be picklable.
  * mode "inprocess" (trusted code, e.g. a tool that needs the network): one daemon thread per call, so the calls
    of a turn run concurrently and a tool must be thread-safe. Past the deadline the call becomes a timeout
    observation and its thread is abandoned: Python cannot stop a thread, so it runs on to its end; tools that may
    never return belong in the pool.
Observations: a str result is the tool message as it is, any other result its JSON (repr when it has none), cut
to `max_chars` (a long output would eat the completion budget). Failures read "error: ..." and name the tool:
unknown tool, a tool call whose JSON could not be read, bad arguments, an exception (type and message), a deadline
overrun, a memory-cap kill, a crashed worker; the pool or thread machinery failing is an observation too.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import threading
import time
from typing import Callable, Sequence

from reasoner.agents.tool_schema import check_arguments, function_schema, load_function, malformed, xml_arguments

MODES = ("pool", "inprocess")
MAX_CHARS = 4000


# ============================================================================================== observations
@dataclasses.dataclass(frozen=True)
class Observation:
    """One call's outcome: `content` is the tool message the model reads; `record` what the trajectory keeps
    (FunctionTool: arguments, outcome, error, elapsed_s); `ok` False for every failure."""

    content: str
    record: dict
    ok: bool = True


class Resolved:
    """A call whose observation is already known (a failure found before running it)."""

    def __init__(self, observation: Observation):
        self.observation = observation

    def result(self) -> Observation:
        return self.observation


def render_value(value, max_chars: int = MAX_CHARS) -> str:
    """The tool message for a result: a str as it is, else its JSON (repr without one), cut to `max_chars`."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError):
            text = repr(value)
    return text if len(text) <= max_chars else text[:max_chars] + "\n...[truncated]"


def failure(name: str, arguments, outcome: str, error: str, elapsed_s: float = 0.0) -> Observation:
    return Observation(content=f"error: {error}", ok=False, record={
        "arguments": arguments, "outcome": outcome, "error": error, "content": f"error: {error}",
        "elapsed_s": elapsed_s})


def _success(value, arguments, elapsed_s: float, max_chars: int) -> Observation:
    content = render_value(value, max_chars)
    return Observation(content=content, record={"arguments": arguments, "outcome": "ok", "error": None,
                                                "content": content, "elapsed_s": elapsed_s})


class _ThreadCall:
    """An in-process call on a daemon thread; `result()` waits at most until the call's deadline."""

    def __init__(self, fn, kwargs: dict, *, name: str, arguments, timeout_s: float, max_chars: int):
        self.name, self.arguments, self.timeout_s, self.max_chars = name, arguments, timeout_s, max_chars
        self._future: concurrent.futures.Future = concurrent.futures.Future()
        self._start = time.monotonic()
        self._observation = None
        threading.Thread(target=self._run, args=(fn, kwargs), daemon=True, name=f"tool-{name}").start()

    def _run(self, fn, kwargs) -> None:
        try:
            value = fn(**kwargs)
            self._future.set_result(_success(value, self.arguments, time.monotonic() - self._start, self.max_chars))
        except BaseException as err:  # noqa: BLE001 - a tool's failure is an observation
            error = f"{self.name} raised {type(err).__name__}: {err}"
            self._future.set_result(failure(self.name, self.arguments, "error", error,
                                            time.monotonic() - self._start))

    def result(self) -> Observation:
        if self._observation is None:
            try:
                left = self._start + self.timeout_s - time.monotonic()
                self._observation = self._future.result(timeout=max(0.0, left))
            except concurrent.futures.TimeoutError:
                self._observation = failure(self.name, self.arguments, "timeout",
                                            f"{self.name} did not finish within {self.timeout_s:g} s",
                                            self.timeout_s)
        return self._observation


class _PoolCall:
    """A pool call; `result()` maps the pool's CallResult (ok / error / timeout / memory / crash) to an Observation."""

    def __init__(self, future, *, name: str, arguments, timeout_s: float, memory_mb: int, max_chars: int):
        self.future, self.name, self.arguments = future, name, arguments
        self.timeout_s, self.memory_mb, self.max_chars = timeout_s, memory_mb, max_chars

    def result(self) -> Observation:
        r = self.future.result()
        if r.outcome == "ok":
            return _success(r.value, self.arguments, r.elapsed_s, self.max_chars)
        raised = (r.error or "").split("\n")[-1]
        error = {"error": f"{self.name} raised {raised}",
                 "timeout": f"{self.name} did not finish within {self.timeout_s:g} s",
                 "memory": f"{self.name} exceeded its {self.memory_mb} MB memory cap",
                 "crash": f"{self.name} crashed ({r.error})"}[r.outcome]
        return failure(self.name, self.arguments, r.outcome, error, r.elapsed_s)


# ============================================================================================== toolset
@dataclasses.dataclass(frozen=True)
class FunctionTool:
    """One function served as a tool: its schema and, for the pool, the "module:function" target."""

    name: str
    schema: dict
    fn: Callable
    target: str | None


def function_tool(fn: Callable | str, *, need_target: bool) -> FunctionTool:
    """A FunctionTool from a function or a "module:function" spec; with `need_target`, the function must be
    importable by that path in a pool worker."""
    spec = fn if isinstance(fn, str) else None
    fn = load_function(fn) if spec is not None else fn
    schema = function_schema(fn)
    name = schema["function"]["name"]
    target = spec or f"{getattr(fn, '__module__', '')}:{getattr(fn, '__qualname__', '')}"
    if need_target:
        module = target.partition(":")[0]
        if module in ("", "__main__") or "<locals>" in target or "<lambda>" in target:
            raise ValueError(f"tool {name}: the pool imports tools by module path, and {target!r} cannot be "
                             "imported in a worker; move it to a module or use mode 'inprocess'")
        if load_function(target) is not fn:
            raise ValueError(f"tool {name}: {target!r} does not resolve to this function in a fresh process")
    return FunctionTool(name=name, schema=schema, fn=fn, target=target)


class Toolset:
    """Functions served as tools under one deadline and mode (see the module docstring); `submit(call)` never raises.

    functions: callables or "module:function" specs. The pool (mode "pool", `workers` processes) starts on the
    first call and `close()` stops it; `pool=` lends one the caller owns (kept open by close()).
    """

    def __init__(self, functions: Sequence[Callable | str], *, mode: str = "pool", timeout_s: float = 10.0,
                 workers: int = 2, memory_mb: int = 512, max_chars: int = MAX_CHARS, pool=None):
        if mode not in MODES:
            raise ValueError(f"tool mode {mode!r}: expected one of {MODES}")
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
            raise ValueError(f"tool timeout_s={timeout_s!r}: expected a number of seconds > 0")
        if isinstance(functions, str) or not functions:
            raise ValueError(f"tools={functions!r}: expected a non-empty list of functions or 'module:function' specs")
        self.tools: dict[str, FunctionTool] = {}
        for fn in functions:
            tool = function_tool(fn, need_target=mode == "pool")
            if tool.name in self.tools:
                raise ValueError(f"tools: two tools are named {tool.name!r} ({self.tools[tool.name].target}, "
                                 f"{tool.target})")
            self.tools[tool.name] = tool
        self.mode, self.timeout_s, self.workers, self.memory_mb = mode, float(timeout_s), int(workers), int(memory_mb)
        self.max_chars = int(max_chars)
        self._pool, self._owns_pool = pool, pool is None
        self._lock = threading.Lock()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.tools)

    @property
    def schemas(self) -> list[dict]:
        return [t.schema for t in self.tools.values()]

    @property
    def pool(self):
        with self._lock:
            if self._pool is None:  # started on first use
                from reasoner.verifiers.pool import VerifierPool

                self._pool = VerifierPool(workers=self.workers, deadline_s=self.timeout_s, memory_mb=self.memory_mb,
                                          isolate="auto")
            return self._pool

    def submit(self, call):
        """Starts `call` (a ToolCall) and returns at once an object whose `result()` is its Observation."""
        tool = self.tools.get(call.name)
        if tool is None:
            return Resolved(failure(call.name, call.arguments, "unknown_tool", f"unknown tool {call.name!r}; "
                                    f"available tools: {', '.join(self.tools)}"))
        why = malformed(call)
        if why is not None:
            return Resolved(failure(call.name, call.arguments, "malformed", why))
        arguments = xml_arguments(tool.schema, call.arguments) if call.parse_mode == "xml" else call.arguments
        kwargs, why = check_arguments(tool.schema, arguments)
        if why is not None:
            return Resolved(failure(call.name, call.arguments, "bad_arguments", why))
        try:
            if self.mode == "inprocess":
                return _ThreadCall(tool.fn, kwargs, name=tool.name, arguments=call.arguments,
                                   timeout_s=self.timeout_s, max_chars=self.max_chars)
            future = self.pool.submit(tool.target, task_kwargs=kwargs, deadline_s=self.timeout_s)
            return _PoolCall(future, name=tool.name, arguments=call.arguments, timeout_s=self.timeout_s,
                             memory_mb=self.memory_mb, max_chars=self.max_chars)
        except Exception as err:  # noqa: BLE001 - no pool, no thread: the call fails, the rollout goes on
            return Resolved(failure(call.name, call.arguments, "crash",
                                    f"{call.name} could not be started ({type(err).__name__}: {err})"))

    def close(self) -> None:
        """Stops the pool this toolset started (a pool passed in belongs to the caller)."""
        with self._lock:
            if self._owns_pool and self._pool is not None:
                self._pool.close()
                self._pool = None

    def __enter__(self) -> Toolset:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
