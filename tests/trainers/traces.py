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


CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def word_tokenizer(out_dir, *, texts) -> pathlib.Path:
    """A small word-level HF tokenizer (vocabulary of the words in `texts`) with a ChatML template.

    Tiny training tests use it instead of SmolLM2's 49k vocabulary so the LM head stays small.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<unk>", "<|im_start|>", "<|im_end|>"]
    pre = pre_tokenizers.Whitespace()
    words = sorted({w for t in texts for w, _ in pre.pre_tokenize_str(t)} | {"user", "assistant", "system"})
    vocab = {tok: i for i, tok in enumerate(specials + words)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre
    tok.add_special_tokens(specials)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>",
                                   eos_token="<|im_end|>", bos_token=None)
    fast.chat_template = CHAT_TEMPLATE
    out_dir = pathlib.Path(out_dir)
    fast.save_pretrained(str(out_dir))
    return out_dir


def write_run_data(root, *, kind: str, n_train: int, n_val: int, seed: int = 0) -> tuple[pathlib.Path, pathlib.Path, int]:
    """(jsonl dir, tokenizer dir, vocab size) for a tiny run of `kind`."""
    root = pathlib.Path(root)
    data = write_jsonl(root / f"{kind}_data", kind=kind, n_train=n_train, n_val=n_val, seed=seed)
    texts = []
    for split in ("train", "validation"):
        for line in (data / f"{split}.jsonl").read_text().splitlines():
            record = json.loads(line)
            texts += [m["content"] for m in record["prompt"]]
            texts += [record[k] for k in ("completion", "chosen", "rejected") if k in record]
    tok_dir = word_tokenizer(root / f"{kind}_tokenizer", texts=texts)
    from transformers import AutoTokenizer

    vocab = len(AutoTokenizer.from_pretrained(str(tok_dir)))
    return data, tok_dir, vocab


def tiny_overrides(*, data_dir, tokenizer_dir, vocab: int, mesh: str = "fsdp=-1") -> list[str]:
    """Config overrides for a fast tiny run on the word-level tokenizer (vocab rounded up to 8)."""
    return [f"--config.data.path={data_dir}", f"--config.model.tokenizer={tokenizer_dir}",
            f"--config.model.random.vocab_size={(vocab + 7) // 8 * 8}", f"--config.mesh={mesh}",
            "--config.data.seq_len=192"]
