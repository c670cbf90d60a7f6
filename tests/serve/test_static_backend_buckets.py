"""The static serve backend buckets its shapes: groups of varied sizes and budgets compile a bounded set of programs,
and every request still gets what an unbucketed run gives it."""

import jax
import numpy as np
import pytest

from reasoner.sampling import Sampler, SamplingParams
from reasoner.serve.backend import GenRequest, SamplerBackend


@pytest.fixture
def lowered():
    """A counter of the programs lowered (every jit cache miss) while the test runs."""
    from jax._src import monitoring

    count = [0]

    def listen(event: str, _secs: float, **_kw) -> None:
        if event == "/jax/core/compile/jaxpr_to_mlir_module_duration":
            count[0] += 1

    jax.monitoring.register_event_duration_secs_listener(listen)
    yield count
    monitoring.unregister_event_duration_listener(listen)


def _requests(sizes, budget, *, seed):
    return [GenRequest(prompt_ids=tuple(int(t) for t in np.arange(3 + i) % 50 + 7),
                       params=SamplingParams(max_new_tokens=budget, temperature=0.0, eos_ids=(), seed=seed),
                       seeded=True)
            for i in range(sizes)]


def test_groups_in_one_bucket_compile_nothing_new_and_answer_as_unbucketed_runs(tiny_model, tokenizer, lowered):
    backend = SamplerBackend(Sampler(tiny_model, tokenizer), max_len=128)
    first = backend.generate(_requests(5, 17, seed=3))  # 5 prompts -> 6 rows, budget 17 -> 24
    assert [c.num_tokens for r in first for c in r] == [17] * 5
    after_first = lowered[0]
    for size, budget in ((6, 20), (5, 24), (6, 18)):  # the same buckets: no new program
        answers = backend.generate(_requests(size, budget, seed=3))
        assert [c.num_tokens for r in answers for c in r] == [budget] * size
        assert all(c.finish_reason == "length" for r in answers for c in r)
    assert lowered[0] == after_first
    # each request's tokens are those of an exact run of its own group (6 prompts, budget 18, no padding, no cut)
    exact = Sampler(tiny_model, tokenizer).generate([list(r.prompt_ids) for r in _requests(6, 18, seed=3)],
                                                    SamplingParams(max_new_tokens=18, temperature=0.0, eos_ids=(),
                                                                   seed=3), max_len=128)
    assert [list(c.tokens) for r in answers for c in r] == [list(c.tokens) for c in exact]
    # a group of 7 (-> 8 rows) is a new bucket, and a streamed group keeps its exact budget
    backend.generate(_requests(7, 18, seed=3))
    assert lowered[0] > after_first
    streamed = [GenRequest(prompt_ids=(5, 6, 7), params=SamplingParams(max_new_tokens=5, temperature=0.0, eos_ids=()),
                           on_text=lambda j, d: None)]
    assert [c.num_tokens for c in backend.generate(streamed)[0]] == [5]
