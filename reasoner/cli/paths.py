"""Argument types for the directories commands write into."""

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
