"""Navigator transfer: a navigator trained by `trainers.dqn` is read back from its run directory and evaluated by the
RL-of-Thoughts pipeline with another LLM (a tiny random Mistral saved by transformers, on SmolLM2's tokenizer)."""

import json
import shutil

import numpy as np
import pytest

from reasoner.agents.rlot.transfer import NavigatorLoadError, load_navigator
from tests.trainers.test_dqn import GridMDP, T, X, _obs


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A navigator trained on the synthetic grid MDP (the DQN protocol; 48 episodes), with checkpoints."""
    from configs.rlot import get_config
    from trainers.dqn import train_dqn

    config = get_config("tiny")
    config.dqn.update(dict(num_episodes=48, buffer_size=32, batch_size=16, checkpoint_every=2))
    run = tmp_path_factory.mktemp("navigator_run")
    return train_dqn(GridMDP(), config, workdir=run), run


def probe_states():
    grid = np.stack([_obs(x, t) for t in range(T) for x in range(X)])
    return np.concatenate([grid, np.random.default_rng(0).integers(0, 4, (20, 7)).astype(np.float32)])


def test_loaded_navigator_is_the_trained_one(trained, tmp_path):
    result, run = trained
    loaded = load_navigator(run)
    obs = probe_states()
    np.testing.assert_array_equal(loaded.q_values(obs), result.q_values(obs))  # the same network, bit for bit
    np.testing.assert_array_equal(loaded.act(obs), result.act(obs))
    assert loaded.num_params == result.num_params == 2566
    assert loaded.episodes == int(result.state.episodes) == 48 and loaded.updates == int(result.state.updates) > 0
    assert loaded.source.endswith(f"checkpoints/{loaded.step}")
    # a demo's workdir holds the run under navigator/
    demo = tmp_path / "demo"
    shutil.copytree(run, demo / "navigator")
    assert load_navigator(demo).episodes == 48
    # the newest checkpoint damaged: the older one is read, and nothing in the run directory moves
    steps = sorted(int(p.name) for p in (demo / "navigator" / "checkpoints").iterdir())
    for f in (demo / "navigator" / "checkpoints" / str(steps[-1]) / "state").rglob("*"):
        if f.is_file() and f.stat().st_size > 64:
            f.write_bytes(b"\0" * f.stat().st_size)
    older = load_navigator(demo)
    assert older.step == steps[-2] and older.episodes < 48
    assert sorted(int(p.name) for p in (demo / "navigator" / "checkpoints").iterdir()) == steps
    with pytest.raises(NavigatorLoadError, match="no checkpoints/"):
        load_navigator(tmp_path / "nowhere")


@pytest.fixture(scope="module")
def mistral_dir(tmp_path_factory, tokenizer):
    """A tiny random Mistral (sliding window 16) on SmolLM2's vocabulary, saved with transformers."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.MistralConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, sliding_window=16, tie_word_embeddings=True, max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    model = transformers.MistralForCausalLM(config).to(torch.float32)
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(200.0)  # peaked logits: greedy choices far from ties
    path = tmp_path_factory.mktemp("mistral")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def test_pipeline_evaluates_the_loaded_navigator_with_another_model(trained, mistral_dir, shared_data, tmp_path):
    from configs.rlot import get_config
    from reasoner.agents.rlot import inference
    from reasoner.agents.rlot.env import ThoughtEnv
    from reasoner.agents.rlot.llm import SamplerLM
    from reasoner.agents.rlot.setup import env_args, load_model_and_tokenizer, split_problems
    from reasoner.pipelines.rlot import run

    result, run_dir = trained
    config = get_config("demo_tiny")
    config.demo.update(dict(navigator=str(run_dir), model=mistral_dir, data_root=str(shared_data), navigator_sc=0))
    report = run(config, workdir=tmp_path, progress=False)
    on_disk = json.loads((tmp_path / "report" / "report.json").read_text())
    assert on_disk["navigator_from"] == report["navigator_from"] == load_navigator(run_dir).source
    assert report["model"] == mistral_dir and report["episodes_trained"] == 48 and report["training_history"] == []
    assert [m["method"] for m in report["methods"]] == ["navigator", "direct", "cot", "cot_sc@2"]
    assert not (tmp_path / "navigator").exists() and not (tmp_path / "report" / "rlot_training.png").exists()
    # the same episodes as the trained navigator's own greedy policy driving the other model directly
    model, tokenizer = load_model_and_tokenizer(mistral_dir)
    assert model.cfg.family == "mistral" and model.cfg.sliding_window == 16
    _, test = split_problems(config)
    e, d = config.env, config.demo
    lm = SamplerLM(model, tokenizer, max_new_tokens=int(e.max_new_tokens), max_len=int(d.max_len), seed=int(d.seed))
    env = ThoughtEnv(lm, **env_args(config, model=model, tokenizer=tokenizer, problems=test))
    direct = inference.navigate(env, result.act, test)
    assert [ep["blocks"] for ep in report["navigator_episodes"]] == [ep.blocks for ep in direct.episodes]
    assert [ep["answer"] for ep in report["navigator_episodes"]] == [ep.answer for ep in direct.episodes]
