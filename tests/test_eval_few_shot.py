"""Few-shot evaluation (the paper's in-context baselines): the prompts are the seeded k-shot chats of
`few_shot_messages`, shots are dropped from the end (never redrawn) until a prompt fits the model's context, the
model sees exactly those prompts, and a few-shot run is scored and reported like a zero-shot one; the configs carry
the paper's k (10 ProofWriter, 5 DeepRD) for the base model only."""

from __future__ import annotations

import dataclasses
import pathlib

import pytest

from reasoner.data.astar_traces import deeprd_records
from reasoner.data.deeprd import DeepRDSpec
from reasoner.evaluation import EvalSettings, build_prompts, evaluate, evaluate_completions, generate_completions
from reasoner.tasks.astar import (few_shot_choice, few_shot_messages, messages_with_shots, problem_from_record,
                                   sft_completion)
from reasoner.tokenization import chat_ids

SPEC = DeepRDSpec(lookahead=(2, 3), branches=(2, 3), extra_ratio=0.0, max_degree=3)
CONFIGS = pathlib.Path(__file__).resolve().parents[1] / "configs"


@pytest.fixture(scope="module")
def train():
    return [problem_from_record(r) for r in deeprd_records(seed=5, split="train", size=10, spec=SPEC)]


@pytest.fixture(scope="module")
def test():
    return [problem_from_record(r) for r in deeprd_records(seed=5, split="test", size=3, spec=SPEC)]


def test_prompts_are_the_seeded_k_shot_chats(train, test):
    settings = EvalSettings(few_shot=3, seed=7, few_shot_heuristic="zero", cost="sum")
    prompts = build_prompts(test, settings, examples=train)
    for p, messages in zip(test, prompts.messages):
        assert messages == few_shot_messages(p, train, 3, seed=7, heuristic="zero", cost="sum")
    assert prompts.shots == [3, 3, 3] and prompts.ids is None
    assert prompts.stats == {"k": 3, "heuristic": "zero", "cost": "sum", "mean_shots": 3.0, "min_shots": 3,
                             "prompts_short_of_k": 0, "max_prompt_tokens": None}
    zero = build_prompts(test, EvalSettings(), examples=None)
    assert [m[1:] for m in zero.messages] == [[{"role": "user", "content": p.verbalizer.context(p.goal)}]
                                             for p in test]
    with pytest.raises(ValueError, match="few_shot=3: expected training examples"):
        build_prompts(test, settings)
    with pytest.raises(ValueError, match="few_shot=-1"):
        EvalSettings(few_shot=-1)
    with pytest.raises(ValueError, match="cost='min'"):
        EvalSettings(cost="min")


def test_shots_are_dropped_from_the_end_until_the_prompt_fits(train, test, tokenizer):
    k, budget = 4, 32
    settings = EvalSettings(few_shot=k, max_new_tokens=budget)
    drawn = {p.id: [(ex, sft_completion(ex)) for ex in few_shot_choice(p, train, k, seed=0)] for p in test}
    # token length of every problem's prompt with its first n drawn shots (brute force over n)
    lengths = {p.id: [len(chat_ids(tokenizer, messages_with_shots(p, drawn[p.id][:n]))) for n in range(k + 1)]
               for p in test}
    context = lengths[test[0].id][2] + budget  # test[0] fits exactly 2 shots
    prompts = build_prompts(test, settings, examples=train, tokenizer=tokenizer, context=context)
    for p, n, messages, ids in zip(test, prompts.shots, prompts.messages, prompts.ids):
        want = max(m for m in range(k + 1) if lengths[p.id][m] + budget <= context)
        assert n == want and messages == messages_with_shots(p, drawn[p.id][:want])
        assert ids == chat_ids(tokenizer, messages)
    assert prompts.shots[0] == 2 and prompts.stats["prompts_short_of_k"] == sum(n < k for n in prompts.shots)
    assert prompts.stats["max_prompt_tokens"] == max(map(len, prompts.ids)) <= context - budget
    tight = min(lengths[p.id][0] for p in test) + budget - 1  # not even the zero-shot prompt fits
    with pytest.raises(ValueError, match=r"plus max_new_tokens=32 exceeds the model's context of \d+ tokens"):
        build_prompts(test, settings, examples=train, tokenizer=tokenizer, context=tight)


def test_model_sees_the_k_shot_chat_and_is_scored_like_zero_shot(train, test, tokenizer):
    from reasoner.sampling import Sampler, SamplingParams
    from tests.models_shared import TINY, random_decoder

    model = random_decoder(TINY, seed=1, scale=4.0)
    settings = EvalSettings(few_shot=2, max_new_tokens=6, batch_size=3, seed=3, scoring="host")
    few = evaluate(model, tokenizer, test, settings, label="tiny (2-shot)", progress=False, examples=train)
    ids = [chat_ids(tokenizer, few_shot_messages(p, train, 2, seed=3)) for p in test]
    want = Sampler(model, tokenizer).generate(ids, SamplingParams(max_new_tokens=6, temperature=0.0))
    assert few.completions == [[c.text] for c in want]  # the model saw exactly the k-shot chats
    rescored = evaluate_completions(test, few.completions, label="tiny (2-shot)", scoring="host").report
    zero = evaluate(model, tokenizer, test, dataclasses.replace(settings, few_shot=0), label="tiny",
                    progress=False)
    assert set(few.report) == set(zero.report) == set(rescored) | {"generation", "settings"}
    for key in ("accuracy", "efficiency_pushes", "efficiency_pops", "reliability", "mean_rewards"):
        assert few.report[key] == rescored[key]
    assert few.report["settings"]["few_shot"] == 2 and zero.report["settings"]["few_shot"] == 0
    assert few.report["generation"]["few_shot"]["mean_shots"] == 2.0
    assert zero.report["generation"]["few_shot"]["k"] == 0


def test_a_batch_refused_for_memory_is_generated_at_half_the_size(train, test, tokenizer, monkeypatch):
    from reasoner.sampling import Sampler
    from tests.models_shared import TINY, random_decoder

    model = random_decoder(TINY, seed=1, scale=4.0)
    settings = EvalSettings(few_shot=1, max_new_tokens=4, batch_size=3)
    whole, stats = generate_completions(model, tokenizer, test, settings, examples=train, progress=False)
    assert stats["batch_size"] == 3
    from reasoner.sampling import memory

    fits = memory.check_fits

    def limited(cfg, *, batch, **kwargs):  # the host-side memory check refuses > 1 row
        if batch > 1:
            raise MemoryError(f"batch of {batch} rows needs more than is available")
        return fits(cfg, batch=batch, **kwargs)

    monkeypatch.setattr(memory, "check_fits", limited)
    halved, stats = generate_completions(model, tokenizer, test, dataclasses.replace(settings, batch_size=4),
                                         examples=train, progress=False)
    assert halved == whole and stats["batch_size"] == 1  # 4 -> 2 -> 1; greedy rows do not depend on the batch


def test_configs_give_the_papers_k_to_the_base_model_only():
    from configs import astar_paper
    from reasoner.config import load_config
    from reasoner.pipelines.astar import _eval_settings

    demo = load_config(str(CONFIGS / "astar_demo.py") + ":cpu")
    assert demo.eval.few_shot == 0 and _eval_settings(demo).few_shot == 0
    for name in astar_paper.variants():
        c = astar_paper.get_config(name)
        _, dataset, stage, which = name.split("_", 3)
        assert c.eval.few_shot == ({"proofwriter": 10, "deeprd": 5}[dataset] if stage == "sft" else 0), name
        assert c.eval.endpoint_max_tokens == {"proofwriter": 2048, "deeprd": 5000}[dataset]
        settings = _eval_settings(c, few_shot=c.eval.few_shot)
        assert settings.few_shot == c.eval.few_shot and settings.few_shot_heuristic == c.data.heuristic
        assert _eval_settings(c).few_shot == 0  # trained models: zero-shot, as trained



def test_pipeline_base_stage_adds_the_in_context_baseline(tmp_path, monkeypatch):
    """`eval.few_shot` = k adds "base (k-shot)" after the zero-shot base row: the base model, k shots drawn from the
    pipeline's training split with traces under data.heuristic and data.cost. The wiring only: generation is
    replaced by a recorder (the k-shot generation itself is checked above)."""
    import json

    import reasoner.evaluation as evaluation
    from reasoner.config import load_config
    from reasoner.pipelines.astar import run

    calls = []

    def recorder(model, tokenizer, problems, settings, *, label, progress=True, examples=None, group=""):
        calls.append((model, settings, label, examples))
        result = evaluate_completions(problems, [["no proof"]] * len(problems), label=label, scoring="host")
        result.report["generation"] = {"finish_reasons": {}, "few_shot": build_prompts(
            problems, settings, examples=examples).stats}
        result.report["settings"] = dataclasses.asdict(settings)
        return result

    monkeypatch.setattr(evaluation, "evaluate", recorder)
    config = load_config(str(CONFIGS / "astar_demo.py") + ":tiny", [
        "--config.sft.enabled=false", "--config.grpo.enabled=false", "--config.eval.few_shot=2",
        "--config.data.cost=sum"])
    run(config, workdir=tmp_path, progress=False)
    doc = json.loads((tmp_path / "report" / "astar.json").read_text())
    assert [m["label"] for m in doc["models"]] == ["base", "base (2-shot)"] and doc["complete"] is True
    (zero_model, zero, _, none), (few_model, few, _, examples) = calls
    assert few_model is zero_model and none is None and zero.few_shot == 0
    assert (few.few_shot, few.few_shot_heuristic, few.cost) == (2, config.data.heuristic, "sum")
    train = [json.loads(x)["id"] for x in (tmp_path / "data" / "records" / "train.jsonl").read_text().splitlines()]
    assert [e.id for e in examples] == train
    assert doc["models"][1]["generation"]["few_shot"]["mean_shots"] == 2.0


def test_one_device_evaluation_runs_on_the_rollout_engine_with_the_static_batches_rows(test, tokenizer, monkeypatch):
    """On one device the prompts go through the paged engine (2 x K slots for 3 prompts: a slot is refilled) and
    every row, greedy or sampled, equals what the static sampler gives the same prompt in its batch of 2."""
    from reasoner.evaluation import build_prompts
    from reasoner.sampling import Sampler, SamplingParams
    from reasoner.sampling import rollout_engine
    from reasoner.sampling.buckets import bucket_length
    from tests.models_shared import TINY, random_decoder

    model = random_decoder(TINY, seed=1, scale=4.0)
    made, init = [], rollout_engine.RolloutEngine.__init__

    def recording_init(self, *args, **kwargs):  # records the slots each evaluation asks for
        made.append(kwargs["slots"])
        init(self, *args, **kwargs)

    monkeypatch.setattr(rollout_engine.RolloutEngine, "__init__", recording_init)
    sampler = Sampler(model, tokenizer)
    for settings in (EvalSettings(max_new_tokens=6, batch_size=2),
                     EvalSettings(num_samples=2, temperature=1.0, max_new_tokens=6, batch_size=2, seed=3)):
        got, stats = generate_completions(model, tokenizer, test, settings, progress=False)
        ids = build_prompts(test, settings, tokenizer=tokenizer, context=model.cfg.max_position_embeddings).ids
        params = SamplingParams(max_new_tokens=6, temperature=settings.temperature, n=settings.num_samples,
                                seed=settings.seed)
        max_len = bucket_length(max(len(p) for p in ids) + 6)  # as the evaluation sizes the static cache
        want = []
        for lo in range(0, len(ids), 2):
            out = sampler.generate(ids[lo:lo + 2], params, max_len=max_len)
            want += [[c.text for c in out[i * settings.num_samples:(i + 1) * settings.num_samples]]
                     for i in range(len(ids[lo:lo + 2]))]
        assert got == want and stats["batch_size"] == 2 and len(test) == 3  # 3 prompts through 2 prompts' slots
    assert made == [2, 4]  # batch_size x K slots, once per evaluation
