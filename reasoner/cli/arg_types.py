"""argparse types shared by the commands: a run directory, a positive number."""

from __future__ import annotations

import argparse


def local_workdir(text: str) -> str:
    """A `--workdir`: a filesystem path. A URL such as `gs://bucket/run` is refused up front: pathlib would turn it
    into a local folder `gs:/bucket/run` and orbax would fail at the first checkpoint, after the steps before it.
    On a pod, mount the bucket on every worker (gcsfuse) and pass the mount's path."""
    if "://" in text:
        raise argparse.ArgumentTypeError(
            f"{text!r} is a URL; expected a filesystem path (mount the bucket on every host, e.g. with gcsfuse, "
            f"and pass the mounted path)")
    if not text.strip():
        raise argparse.ArgumentTypeError("empty path; expected a directory")
    return text


def positive_number(kind):
    """An argparse type: a number of `kind` (int or float) > 0, else a one-line error naming the value."""
    noun = "an integer" if kind is int else "a number"

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {noun} > 0, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"expected {noun} > 0, got {text!r}")
        return value
    parse.__name__ = f"positive {kind.__name__}"
    return parse


def non_negative_int(text: str) -> int:
    """An argparse type: an integer >= 0 (a split that may be empty), else a one-line error naming the value."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value
