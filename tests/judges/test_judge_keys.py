"""What a judge's cache key and shared client are keyed by: everything that decides a reply, nothing else.

Endpoint judges: the key is sha256(judge id, prompt messages), the judge id naming URL, model, temperature (0) and
max_tokens, the messages carrying the rubric; the client (`rewards.judged.build_judge`) is shared only by the very
same spec and cache. Sampler judges: the id also names max_len (it cuts replies short) and the model's architecture
and chat template (the caller's label, e.g. "random-seed0", does not tell them apart); before, two sampler judges
with the same label and max_new_tokens shared cached verdicts whatever their max_len or architecture.
"""

import dataclasses
import json

import pytest

from reasoner.judges import CachedJudge, EndpointJudge, SamplerJudge, judge_messages
from tests.chat_stub import ChatStub, serve
from tests.models_shared import TINY, random_decoder, smollm2_path


def _prompt(kind="directionality", trace="given the premise"):
    return judge_messages(kind, source="balanced_copa", observation="Premise: x", reasoning=trace)


def test_endpoint_id_names_what_changes_a_reply_and_nothing_else():
    base = EndpointJudge("http://127.0.0.1:9/v1", "judge", max_tokens=512)
    assert base.judge_id == "endpoint:http://127.0.0.1:9/v1/chat/completions:judge:t0:max512"
    assert EndpointJudge("http://127.0.0.1:9/v1", "judge", max_tokens=256).judge_id != base.judge_id
    assert EndpointJudge("http://127.0.0.1:9/v1", "other", max_tokens=512).judge_id != base.judge_id
    assert EndpointJudge("http://127.0.0.1:8/v1", "judge", max_tokens=512).judge_id != base.judge_id
    # who may ask, how long to wait, how often to retry: a successful reply is the same (failures are not cached)
    same = EndpointJudge("http://127.0.0.1:9/v1/", "judge", max_tokens=512, api_key="sk-secret", timeout_s=5.0,
                         retries=0, max_concurrency=1)
    assert same.judge_id == base.judge_id and "sk-secret" not in same.judge_id


def test_the_rubric_is_in_the_key_through_the_prompt(tmp_path):
    cached = CachedJudge(EndpointJudge("http://127.0.0.1:9/v1", "judge"), tmp_path / "c.jsonl")
    keys = {cached.key(_prompt("coverage")), cached.key(_prompt("directionality"))}
    edited = _prompt("directionality")
    edited[0] = {**edited[0], "content": edited[0]["content"] + " (rubric v2)"}
    assert len(keys | {cached.key(edited)}) == 3


class _Echo(ChatStub):
    """Replies with the max_tokens it was asked for, so a reply tells which judge it answers."""

    def reply(self, body):
        return 200, {"choices": [{"message": {"role": "assistant", "content": f"max {body['max_tokens']}"}}]}


def test_two_endpoint_judges_on_one_cache_file_keep_their_own_verdicts(tmp_path):
    path = tmp_path / "judge_cache.jsonl"
    with serve(_Echo) as url:
        short = CachedJudge(EndpointJudge(url, "judge", max_tokens=16, api_key="sk-a"), path)
        long = CachedJudge(EndpointJudge(url, "judge", max_tokens=4096, api_key="sk-b"), path)
        assert short.reply([_prompt()]) == ["max 16"]
        assert long.reply([_prompt()]) == ["max 4096"]
        again = CachedJudge(EndpointJudge(url, "judge", max_tokens=16, api_key="sk-c"), path)
        assert again.reply([_prompt()]) == ["max 16"] and len(_Echo.bodies) == 2  # the key's owner is irrelevant
    from reasoner.judges.cache import cache_files

    texts = [f.read_text() for f in cache_files(path)]  # each cache's own file: no process index is known here
    assert sum(t.count("\n") for t in texts) == 2 and not any("sk-" in t for t in texts)


def test_build_judge_shares_a_client_only_for_the_same_spec_and_cache(tmp_path):
    from reasoner.rewards.judged import build_judge

    spec = {"endpoint": "http://127.0.0.1:9/keys-test", "model": "judge", "max_tokens": 64}
    first, counters = build_judge(spec, cache="")
    assert build_judge(dict(spec), cache="") == (first, counters)
    for other in ({**spec, "api_key": "sk-a"}, {**spec, "timeout_s": 5.0}, {**spec, "max_tokens": 65}):
        assert build_judge(other, cache="")[0] is not first
    assert build_judge(spec, cache=str(tmp_path / "c.jsonl"))[0] is not first


@pytest.fixture(scope="module")
def tokenizer():
    from reasoner.tokenization import load_tokenizer

    return load_tokenizer(smollm2_path())


def test_sampler_max_len_changes_replies_and_the_cache_keeps_them_apart(tokenizer, tmp_path):
    from reasoner.tokenization import chat_ids

    model = random_decoder(TINY, seed=3, scale=4.0)
    prompt = _prompt()
    tight = len(chat_ids(tokenizer, prompt)) + 2  # room for two reply tokens
    free = SamplerJudge(model, tokenizer, judge_id="tiny", max_new_tokens=6, batch_size=1)
    cut = SamplerJudge(model, tokenizer, judge_id="tiny", max_new_tokens=6, batch_size=1, max_len=tight)
    long_reply, short_reply = free.reply([prompt])[0], cut.reply([prompt])[0]
    assert len(short_reply) < len(long_reply)  # the same greedy reply, cut at max_len
    path = tmp_path / "judge_cache.jsonl"
    assert CachedJudge(free, path).reply([prompt]) == [long_reply]
    assert CachedJudge(cut, path).reply([prompt]) == [short_reply]  # not the other judge's verdict
    assert cut.judge_id.endswith(f":max6:len{tight}") and not free.judge_id.endswith(f":len{tight}")


def test_sampler_id_tells_architectures_apart_under_one_label(tokenizer):
    wider = dataclasses.replace(TINY, intermediate_size=2 * TINY.intermediate_size)
    ids = {SamplerJudge(random_decoder(cfg, seed=0), tokenizer, judge_id="random-seed0").judge_id
           for cfg in (TINY, wider)}
    assert len(ids) == 2
    again = SamplerJudge(random_decoder(TINY, seed=0), tokenizer, judge_id="random-seed0").judge_id
    assert again in ids and json.dumps(again)  # deterministic across constructions
