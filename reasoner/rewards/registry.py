"""Named reward functions, combined with weights, that never let one bad completion stop a GRPO step.

A reward function has the signature `fn(completions, *, examples) -> list[float | None | RewardFailure]`:
`completions` are the B texts (or chat message lists, see `completion_text`), `examples` the B dataset rows
they answer (the prompt's row repeated G times). Per completion it returns a float, None when the function
does not apply to that completion (TRL's convention: left out of the weighted sum), or a `RewardFailure`
(e.g. a verifier timeout) that scores 0 and is counted.

`CompositeReward` calls each function on the batch and sanitises the result:
  - the batch call raises: the function is called again on each completion alone, so only the completions that
    raise get 0; `TimeoutError` counts as a timeout, anything else as an error;
  - a value is NaN or +-inf: 0, counted as non_finite;
  - the call exceeds the function's `timeout_s`: every completion of the batch gets 0, counted as timeouts.
    Python threads cannot be killed, so the late call runs on in its thread: a function with a keyword parameter
    `cancel` gets a `threading.Event` (on every call), set at its deadline (stop there: cancel the pool futures it
    submitted, kill its subprocess); while `max_late_calls` late calls of a function are still running, it is not
    called again (a hung endpoint or solver would otherwise add a thread per step without bound, each holding its
    batch): its batches score 0, counted as timeouts and as `skipped`, and a line on stderr says so once per such spell;
  - a wrong number of values or a non-numeric value is a bug in the function: ValueError naming it.
The total is sum_f w_f * r_f over the applicable functions (NaN when none applies), the NaN-aware
sum-then-normalise of TRL that `trainers.grpo_loss.group_advantages` expects.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import inspect
import math
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

RewardFn = Callable[..., Sequence[Any]]
_FACTORIES: dict[str, Callable[..., RewardFn]] = {}


@dataclasses.dataclass(frozen=True)
class RewardFailure:
    """A per-completion outcome that scores 0 and is counted under `kind` (e.g. "timeout", "error")."""

    kind: str
    message: str = ""


def register_reward(name: str):
    """Decorator registering a reward factory `factory(**options) -> fn` under `name`."""

    def wrap(factory):
        if name in _FACTORIES and _FACTORIES[name] is not factory:
            raise ValueError(f"reward {name!r} is already registered to {_FACTORIES[name].__qualname__}")
        _FACTORIES[name] = factory
        return factory

    return wrap


def registered_rewards() -> list[str]:
    _load_builtin_rewards()
    return sorted(_FACTORIES)


def build_reward(name: str, **options) -> RewardFn:
    """Instantiate the registered reward `name` with its options."""
    _load_builtin_rewards()
    if name not in _FACTORIES:
        raise KeyError(f"unknown reward {name!r}: registered rewards are {sorted(_FACTORIES)}")
    return _FACTORIES[name](**options)


def _load_builtin_rewards() -> None:
    # Importing the modules runs their @register_reward decorators; done lazily to avoid import cycles.
    from reasoner.rewards import match  # noqa: F401

    try:
        from reasoner.rewards import code_exec  # noqa: F401
    except ImportError:  # the code sandbox is optional
        pass
    try:
        from reasoner.rewards import astar  # noqa: F401
    except ImportError:
        pass
    try:
        from reasoner.rewards import smt  # noqa: F401
    except ImportError:
        pass
    from reasoner.rewards import judged  # noqa: F401


def completion_text(completion) -> str:
    """Text of a completion: a string, or the concatenated assistant contents of a chat message list or of a
    scratchpad `Trajectory` (its `.messages`, as GRPO's multi-turn rollouts return)."""
    if isinstance(completion, str):
        return completion
    if not isinstance(completion, Sequence) and isinstance(getattr(completion, "messages", None), list):
        completion = completion.messages
    if isinstance(completion, Sequence) and all(isinstance(m, Mapping) for m in completion):
        return "".join(str(m.get("content") or "") for m in completion if m.get("role", "assistant") == "assistant")
    raise TypeError(f"completion of type {type(completion).__name__}: expected str or a list of chat messages")


@dataclasses.dataclass
class RewardCounters:
    """One reward function's outcomes since construction (or `reset`), kept by `CompositeReward` (`counter_dict`);
    every completion counts once in scored, not_applicable, errors, timeouts or non_finite. GRPO logs
    `reward_failures/<name>` = errors + timeouts + non_finite."""

    calls: int = 0
    """Batch calls of the function (the one-at-a-time re-runs after a failing batch call not included)."""
    completions: int = 0
    """Completions passed to it over those calls."""
    scored: int = 0
    """Completions it gave a finite value."""
    not_applicable: int = 0
    """Completions it returned None for: left out of the weighted sum."""
    errors: int = 0
    """Completions scored 0 that raised (re-run alone) or returned a `RewardFailure`, other than for time."""
    timeouts: int = 0
    """Completions scored 0 for time: every completion of a call past `timeout_s`, and those that raised
    TimeoutError (re-run alone) or returned a "timeout" `RewardFailure`."""
    non_finite: int = 0
    """Completions whose value was NaN or +-inf, scored 0."""
    skipped: int = 0
    """Completions of calls not made because `max_late_calls` late calls were still running (also in timeouts)."""
    late_running: int = 0
    """Calls past `timeout_s` still running now (filled in by `counter_dict`)."""
    seconds: float = 0.0
    """Wall-clock seconds spent in its calls, re-runs included."""
    last_error: str = ""
    """The latest error or timeout as "kind: message", cut to 500 characters."""


@dataclasses.dataclass(frozen=True)
class WeightedReward:
    name: str
    fn: RewardFn
    weight: float = 1.0
    timeout_s: float | None = None


@dataclasses.dataclass(frozen=True)
class RewardBatch:
    """total_B: weighted sum (NaN where no function applied); per_function_BxF: sanitised values (NaN = n/a)."""

    total_B: np.ndarray
    per_function_BxF: np.ndarray
    names: tuple[str, ...]

    def means(self) -> dict[str, float]:
        """Mean of each function over the completions it applied to (TRL's `rewards/<name>/mean`)."""
        out = {}
        for i, name in enumerate(self.names):
            col = self.per_function_BxF[:, i]
            out[name] = float(np.nanmean(col)) if np.any(~np.isnan(col)) else float("nan")
        return out


_TIMED_OUT = object()


class _LateCalls:
    """How many calls of one reward function are still running past their deadline, and whether the spell of
    skipping it has been reported."""

    def __init__(self):
        self.lock = threading.Lock()
        self.running = 0
        self.reported = False


def _accepts_cancel(fn) -> bool:
    try:
        return "cancel" in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin or a callable without a signature
        return False


def _call_with_deadline(fn, completions, examples, timeout_s, late: _LateCalls, *, cancellable: bool = False):
    """Run fn in a daemon thread (its own, so a hung call never blocks the scoring pool); _TIMED_OUT if late, the
    call then counted in `late` until it returns, and its `cancel` event set when `cancellable`."""
    box: dict[str, Any] = {}
    cancel = threading.Event()

    def run():
        try:
            box["values"] = fn(completions, examples=examples, **({"cancel": cancel} if cancellable else {}))
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = err
        finally:
            with late.lock:
                box["done"] = True
                late.running -= box.get("late", 0)

    thread = threading.Thread(target=run, daemon=True, name="reward-deadline")
    thread.start()
    thread.join(timeout_s)
    with late.lock:
        if "done" not in box:
            box["late"] = 1
            late.running += 1
    if box.get("late"):
        cancel.set()
        return _TIMED_OUT
    if "error" in box:
        raise box["error"]
    return box["values"]


class CompositeReward:
    """Weighted sum of reward functions with failure isolation, counters and an async `submit`."""

    def __init__(self, rewards: Sequence[WeightedReward], *, max_workers: int = 2, max_late_calls: int = 2):
        if not rewards:
            raise ValueError("rewards is empty: expected at least one weighted reward function")
        names = [r.name for r in rewards]
        if len(set(names)) != len(names):
            raise ValueError(f"reward names {names}: expected unique names")
        for r in rewards:
            if not math.isfinite(r.weight):
                raise ValueError(f"reward {r.name!r} weight={r.weight}: expected a finite number")
            t = r.timeout_s  # NaN passed `<= 0`, and every call then failed in thread.join as a counted error
            if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not t > 0):
                raise ValueError(f"reward {r.name!r} timeout_s={t!r}: expected a number of seconds > 0, or None")
        if isinstance(max_late_calls, bool) or not isinstance(max_late_calls, int) or max_late_calls < 1:
            raise ValueError(f"max_late_calls={max_late_calls!r}: expected an int >= 1")
        self.max_late_calls = max_late_calls
        self._late = {r.name: _LateCalls() for r in rewards}
        self._cancellable = {r.name: _accepts_cancel(r.fn) for r in rewards}
        self.rewards = tuple(rewards)
        self.counters = {r.name: RewardCounters() for r in rewards}
        self._lock = threading.Lock()
        self._pool = cf.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="reward")

    @classmethod
    def from_config(cls, specs: Sequence[Mapping[str, Any]], **kwargs) -> CompositeReward:
        """From `[{"name": registered name, "weight": w, "timeout_s": s, "options": {...}, "as": alias}]`."""
        rewards = []
        for spec in specs:
            unknown = set(spec) - {"name", "weight", "timeout_s", "options", "as"}
            if "name" not in spec or unknown:
                raise ValueError(f"reward spec {dict(spec)}: expected keys name, weight, timeout_s, options, as")
            fn = build_reward(spec["name"], **dict(spec.get("options", {})))
            rewards.append(WeightedReward(spec.get("as", spec["name"]), fn, float(spec.get("weight", 1.0)),
                                          spec.get("timeout_s")))
        return cls(rewards, **kwargs)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.rewards)

    @property
    def weights(self) -> np.ndarray:
        return np.array([r.weight for r in self.rewards], np.float32)

    def __call__(self, completions: Sequence, *, examples: Sequence[Mapping]) -> RewardBatch:
        if len(completions) != len(examples):
            raise ValueError(
                f"{len(completions)} completions and {len(examples)} examples: expected one per completion"
            )
        columns = [self._score(r, completions, examples) for r in self.rewards]
        per_function = np.array(columns, np.float64).T.reshape(len(completions), len(self.rewards))
        applicable = ~np.isnan(per_function)
        total = np.where(applicable, per_function * self.weights[None, :], 0.0).sum(axis=1)
        total = np.where(applicable.any(axis=1), total, np.nan)
        return RewardBatch(total.astype(np.float32), per_function.astype(np.float32), self.names)

    def submit(self, completions: Sequence, *, examples: Sequence[Mapping]) -> cf.Future:
        """Score in a background thread (overlap host rewards with the next rollout); `.result()` is a RewardBatch."""
        return self._pool.submit(self.__call__, list(completions), examples=list(examples))

    def counter_dict(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {name: dataclasses.asdict(c) | {"late_running": self._late[name].running}
                    for name, c in self.counters.items()}

    def reset(self) -> None:
        with self._lock:
            self.counters = {r.name: RewardCounters() for r in self.rewards}

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------------------------------- internals

    def _score(self, reward: WeightedReward, completions, examples) -> list[float]:
        start = time.perf_counter()
        outcome = self._call(reward, list(completions), list(examples))
        if isinstance(outcome, BaseException):
            if isinstance(outcome, TimeoutError) and getattr(outcome, "whole_batch", False):
                values = [RewardFailure("timeout", str(outcome))] * len(completions)
                if getattr(outcome, "skipped", False):
                    with self._lock:
                        self.counters[reward.name].skipped += len(completions)
            else:
                # Isolate the culprit: re-run one completion at a time.
                values = []
                for c, e in zip(completions, examples):
                    single = self._call(reward, [c], [e])
                    if isinstance(single, BaseException):
                        kind = "timeout" if isinstance(single, TimeoutError) else "error"
                        values.append(RewardFailure(kind, f"{type(single).__name__}: {single}"))
                    else:
                        values.append(single[0])
        else:
            values = outcome
        with self._lock:
            counters = self.counters[reward.name]
            counters.calls += 1
            counters.completions += len(completions)
            counters.seconds += time.perf_counter() - start
            return [self._sanitise(reward.name, v, counters) for v in values]

    def _call(self, reward: WeightedReward, completions, examples):
        """Run one call; returns the checked list of values or the exception it raised."""
        try:
            if reward.timeout_s is None:
                extra = {"cancel": threading.Event()} if self._cancellable[reward.name] else {}  # never set
                values = reward.fn(completions, examples=examples, **extra)
            else:
                skipped = self._skip(reward)
                if skipped is not None:
                    return skipped
                values = _call_with_deadline(reward.fn, completions, examples, reward.timeout_s,
                                             self._late[reward.name], cancellable=self._cancellable[reward.name])
                if values is _TIMED_OUT:
                    err = TimeoutError(f"reward {reward.name!r} exceeded timeout_s={reward.timeout_s}")
                    err.whole_batch = True
                    return err
        except Exception as err:  # noqa: BLE001 - any failure of user code is isolated and counted
            return err
        values = list(values) if values is not None else None
        if values is None or len(values) != len(completions):
            got = "None" if values is None else f"{len(values)} values"
            raise ValueError(f"reward {reward.name!r} returned {got} for {len(completions)} completions")
        return values

    def _skip(self, reward: WeightedReward) -> TimeoutError | None:
        """The failure of a call not made while `max_late_calls` late calls of `reward` still run, else None."""
        late = self._late[reward.name]
        with late.lock:
            running = late.running
            if running < self.max_late_calls:
                late.reported = False
                return None
            report, late.reported = not late.reported, True
        message = (f"reward {reward.name!r} skipped: {running} calls past timeout_s={reward.timeout_s} are still "
                   "running; its batches score 0 (counted as timeouts) until one returns")
        if report:
            print(f"[rewards] {message}", file=sys.stderr, flush=True)
        err = TimeoutError(message)
        err.whole_batch, err.skipped = True, True
        return err

    @staticmethod
    def _sanitise(name: str, value, counters: RewardCounters) -> float:
        if value is None:
            counters.not_applicable += 1
            return float("nan")
        if isinstance(value, RewardFailure):
            if value.kind == "timeout":
                counters.timeouts += 1
            else:
                counters.errors += 1
            counters.last_error = f"{value.kind}: {value.message}"[:500]
            return 0.0
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"reward {name!r} returned {value!r}: expected a float, None or RewardFailure") from None
        if not math.isfinite(value):
            counters.non_finite += 1
            return 0.0
        counters.scored += 1
        return value
