"""Jitted KV-cache sampling: prefill + `lax.while_loop` decode, n samples per shared prefill,
stop strings, per-token log-probs, and multi-turn continuation from the existing cache.

    from reasoner.sampling import Sampler, SamplingParams
    completions = Sampler(model, tokenizer).generate(prompts, SamplingParams(max_new_tokens=64))

Modules: `params` (SamplingParams, validation), `processors` (temperature/top-k/top-p, log-probs),
`engine` (jitted device functions), `session` (host loop, continuation), `stops` (stop strings,
streaming text), `buckets` (prompt padding), `memory` (fit check), `results` (Completion).
The paged continuous-batching generator: `rollout_engine` (RolloutEngine: generate, submit/step/collect,
and `start` -> `engine_session.EngineSession`, multi-turn with Session's interface), `paged_cache`,
`paged_device`, `scheduler`.
"""

from reasoner.sampling.params import SamplingParams
from reasoner.sampling.results import Completion
from reasoner.sampling.session import Sampler, Session

__all__ = ["Completion", "Sampler", "SamplingParams", "Session"]
