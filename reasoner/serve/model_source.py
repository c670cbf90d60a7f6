"""What `reasoner serve --model M` may name, resolved to (checkpoint path, tokenizer source).

M is a preset (`smollm2-135m-instruct`), a `.gguf` file, an HF directory (`config.json` + safetensors: a
downloaded model, or our `export_hf` output, where a LoRA run's adapters are already merged into the kernels),
or a training stage's directory holding such an export in `export/` (e.g. `<demo workdir>/sft`).

Exports carry weights, not a vocabulary: the tokenizer is `--tokenizer`, else the checkpoint's own, else the
embedded SmolLM2's (every config here trains from it); it must fit the model's vocabulary.
"""

from __future__ import annotations

import dataclasses
import os

DEFAULT_TOKENIZER = "smollm2-135m-instruct"


@dataclasses.dataclass(frozen=True)
class ModelSource:
    checkpoint: str
    tokenizer: str
    name: str  # the id `/v1/models` reports


def _has_tokenizer(path: str) -> bool:
    return os.path.isdir(path) and any(os.path.isfile(os.path.join(path, f))
                                       for f in ("tokenizer.json", "tokenizer_config.json"))


def resolve_model(model: str, *, tokenizer: str | None = None, name: str | None = None) -> ModelSource:
    """See module docstring; raises FileNotFoundError naming what was looked for."""
    from reasoner.models.presets import PRESETS, resolve

    if model in PRESETS:
        checkpoint = resolve(model)
    elif os.path.isfile(model) and model.endswith(".gguf"):
        checkpoint = model
    elif os.path.isdir(model) and os.path.isfile(os.path.join(model, "config.json")):
        checkpoint = model
    elif os.path.isfile(os.path.join(model, "export", "config.json")):
        checkpoint = os.path.join(model, "export")
    else:
        raise FileNotFoundError(
            f"--model {model}: expected a preset ({', '.join(PRESETS)}), a .gguf file, an HF directory with "
            f"config.json, or a training directory with export/config.json")
    if tokenizer is None:
        if checkpoint.endswith(".gguf"):
            tokenizer = checkpoint
        elif _has_tokenizer(checkpoint):
            tokenizer = checkpoint
        elif _has_tokenizer(os.path.dirname(os.path.normpath(checkpoint))):
            tokenizer = os.path.dirname(os.path.normpath(checkpoint))
        else:
            tokenizer = DEFAULT_TOKENIZER
    label = name or (model if model in PRESETS else os.path.basename(os.path.normpath(model)))
    return ModelSource(checkpoint=checkpoint, tokenizer=tokenizer, name=label)


def check_vocabulary(tokenizer, vocab_size: int, *, source: ModelSource) -> None:
    """The tokenizer's ids must all be rows of the model's embedding."""
    if len(tokenizer) > vocab_size:
        raise ValueError(f"tokenizer {source.tokenizer} has {len(tokenizer)} tokens but the model {source.checkpoint} "
                         f"embeds {vocab_size}: pass the matching --tokenizer")
