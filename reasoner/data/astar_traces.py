"""A* problems -> chat SFT examples (prompt messages + verbalized A* trace) and the chat-JSONL files of
`reasoner.data.chat_jsonl` (`<dir>/<split>.jsonl`, one `{"prompt": [...], "completion": "...", "id": ...}` per line).

Used by the A* pipeline (`reasoner.pipelines.astar`) to turn a DeepRD or ProofWriter split into SFT data for one
search order (heuristic "zero" = Dijkstra, "dependency", "true"), as in the paper's §4.1 "Search Orders and Training",
under one A* cost ("max": proof depth, Eq. 2; "sum": number of vertices, App. A.2). The pipeline passes its
`data.cost`, the same key its GRPO stage hands every A* reward, so traces and rewards rank proofs alike.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterable, Mapping

from reasoner.data.jsonl import write_jsonl
from reasoner.tasks.astar import AStarProblem, prompt_messages, sft_completion

__all__ = ["sft_example", "sft_examples", "write_jsonl", "write_splits", "deeprd_records"]


def sft_example(problem: AStarProblem, *, heuristic: str = "dependency", cost: str = "max") -> dict:
    """{"id", "prompt": [system, user], "completion": verbalized A* trace under `heuristic` and `cost`}."""
    return {"id": problem.id, "prompt": prompt_messages(problem),
            "completion": sft_completion(problem, heuristic=heuristic, cost=cost)}


def sft_examples(problems: Iterable[AStarProblem], *, heuristic: str = "dependency", cost: str = "max") -> list[dict]:
    return [sft_example(p, heuristic=heuristic, cost=cost) for p in problems]


def write_splits(out_dir, splits: Mapping[str, Iterable[AStarProblem]], *, heuristic: str = "dependency",
                 cost: str = "max") -> dict[str, int]:
    """Writes `<out_dir>/<split>.jsonl` of SFT examples per split; returns {split: count}."""
    counts = {}
    for split, problems in splits.items():
        examples = sft_examples(problems, heuristic=heuristic, cost=cost)
        write_jsonl(pathlib.Path(out_dir) / f"{split}.jsonl", examples)
        counts[split] = len(examples)
    return counts


def deeprd_records(*, seed: int, split: str, size: int, spec) -> list[dict]:
    """DeepRD problems of a split as dataset records (each checked by host A*; see `reasoner.data.deeprd`)."""
    from reasoner.data.deeprd import generate_split, problem_record

    return [problem_record(p) for p in generate_split(seed=seed, split=split, size=size, spec=spec)]
