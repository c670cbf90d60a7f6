"""Functions served as tools in the tests (importable by module path, so the verifier pool's workers can run them;
standard library only, so a worker stays light)."""

from __future__ import annotations

import os
import time
from typing import Any, Literal, Optional


def add(a: int, b: int = 0) -> int:
    """Add two integers.

    Args:
        a: The first addend.
        b: The second addend,
            zero when left out.
    """
    assert type(a) is int and type(b) is int, (a, b)  # the arguments arrive as the hints say
    return a + b


def boom(reason: str) -> str:
    """Always fails.

    Args:
        reason: What the error says.

    Raises:
        ValueError: always.
    """
    raise ValueError(f"boom: {reason}")


def nap(seconds: float) -> str:
    """Sleep, then say so.

    Args:
        seconds: How long to sleep.
    """
    time.sleep(seconds)
    return f"slept {seconds} s"


def forecast(city: Literal["paris", "rome"], days: int | None = None, units: Optional[str] = "metric",
             tags: list[str] | None = None, weights: dict[str, float] | None = None) -> dict:
    """Weather forecast for a city.

    A second paragraph that belongs to the description.

    Args:
        city: Which city.
        days: How many days ahead.
        units: The unit system (choices: ["metric", "imperial"])
        tags: Labels to attach.
        weights: A weight per model.

    Returns:
        The forecast.
    """
    return {"city": city, "days": days, "units": units, "tags": tags, "weights": weights}


def shapes(point: tuple[int, float], grid: list[list[int]], value: int | str, anything: Any, flag: bool = False):
    """Shapes of arguments.

    Args:
        point: An (x, y) pair.
        grid: Rows of integers.
        value: A number or a name.
        anything: Whatever.
        flag: A switch.
    """
    assert isinstance(point, tuple), point
    return [list(point), grid, value, anything, flag]


def whoami() -> int:
    """The process id of the process that ran the call."""
    return os.getpid()


def submit(answer: str) -> str:
    """Submit the final answer; ends the episode.

    Args:
        answer: The final answer.
    """
    if not answer.strip():
        raise ValueError("empty answer")
    return answer.strip().upper()


def undocumented(x: int, y: str = "a") -> str:
    """No Args section at all."""
    return f"{x}{y}"
