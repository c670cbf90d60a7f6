"""Synthetic A*-style search traces for tiny training runs: small reachability programs, verbalized.

Each example asks to prove `reach(x0, xk)` over a random chain with distractor edges; the completion
is a search trace in the style of the A* post-training verbalizations (pop, push with priority, proof).
Deterministic in `seed`, so tests that train on it are reproducible.
"""

from __future__ import annotations

import json
import pathlib
import random


def astar_example(rng: random.Random) -> dict:
    names = rng.sample([f"n{i}" for i in range(30)], 7)
    chain = names[: rng.randint(3, 5)]
    edges = [(a, b) for a, b in zip(chain, chain[1:])]
    edges += [(rng.choice(chain), rng.choice(names[len(chain):])) for _ in range(2)]
    rng.shuffle(edges)
    goal = (chain[0], chain[-1])
    facts = " ".join(f"edge({a},{b})." for a, b in edges)
    prompt = f"Facts: {facts} Rule: edge(X,Y), reach(Y,Z) -> reach(X,Z). Prove reach({goal[0]},{goal[1]})."
    lines = []
    for depth, (a, b) in enumerate(zip(chain, chain[1:])):
        lines.append(f"pop {a} (g={depth}, h={len(chain) - 1 - depth})")
        lines.append(f"push reach({a},{b}) priority {len(chain) - 1}")
    lines.append(f"goal reach({goal[0]},{goal[1]}) proved in {len(chain) - 1} steps.")
    return {"prompt": [{"role": "user", "content": prompt}], "completion": "\n".join(lines)}


def preference_example(rng: random.Random) -> dict:
    """A pair whose chosen side is a correct trace and rejected side a trace with a wrong conclusion."""
    ex = astar_example(rng)
    rejected = ex["completion"].replace("proved", "refuted").replace("pop", "skip")
    return {"prompt": ex["prompt"], "chosen": ex["completion"], "rejected": rejected}


def write_jsonl(root, *, kind: str, n_train: int, n_val: int, seed: int = 0) -> pathlib.Path:
    """Writes train.jsonl and validation.jsonl of `kind` ('sft' | 'dpo') under `root`."""
    root = pathlib.Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    make = astar_example if kind == "sft" else preference_example
    for split, n in (("train", n_train), ("validation", n_val)):
        with open(root / f"{split}.jsonl", "w") as f:
            for _ in range(n):
                f.write(json.dumps(make(rng)) + "\n")
    return root
