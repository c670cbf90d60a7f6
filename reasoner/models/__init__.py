"""Flax NNX decoder for Llama / Qwen2 / Qwen3 checkpoints, weight loading, export, presets, LoRA.

    from reasoner.models import load_model, init_cache
    model = load_model("smollm2-135m-instruct")            # or a .gguf file / HF directory
    logits_BxTxV, _ = model(tokens_BxT, positions_BxT=positions_BxT, segment_ids_BxT=None)
    cache = init_cache(model.cfg, batch=B, max_len=S)
    logits, cache = model(prompt_BxT, positions_BxT=pos, segment_ids_BxT=seg, cache=cache)

See `reasoner.models.decoder` for the forward contract (masking, KV cache offsets) and
`reasoner.models.loading` for sharded loading.
"""

from reasoner.models.config import ModelConfig, UnsupportedModelError
from reasoner.models.decoder import Decoder, KVCache, init_cache
from reasoner.models.loading import load_model, open_checkpoint
from reasoner.models.sources import CheckpointError

__all__ = ["ModelConfig", "UnsupportedModelError", "Decoder", "KVCache", "init_cache", "load_model",
           "open_checkpoint", "CheckpointError"]
