"""GRPO's validation pass and best checkpoint (`trainers.grpo_eval`): a sampled pass every step over held-out
prompts scored by one named reward, `best/` keeping the step with the HIGHEST mean (mode "max"), bit-identical to
that step's regular checkpoint, and `export_best` exporting it rather than the final state.

The validation reward is scripted (its k-th call returns fixed scores), so the expected means and the argmax are
known by arithmetic; the run itself is the CEDAR tiny config (LoRA) on a 1-layer random model."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from tests.trainers.test_grpo import one_device_mesh, tiny, tok_dir  # noqa: F401 - tok_dir is a fixture
from trainers import grpo, grpo_eval

# Per validation call, the score of each of the two held-out rows: means 0.25, 0.75, 0.25 -> best is step 2
# (a "min" mode would pick step 1 and the last step would be 3).
SCRIPT = [[0.0, 0.5], [1.0, 0.5], [0.25, 0.25]]


def scripted_rewards():
    from reasoner.rewards import CompositeReward, WeightedReward, completion_text

    calls = []

    def length(completions, *, examples):  # the training signal; not applicable to validation rows
        return [None if e.get("split") == "val" else float(len(completion_text(c).split()))
                for c, e in zip(completions, examples)]

    def val(completions, *, examples):
        if not all(e.get("split") == "val" for e in examples):
            return [None] * len(completions)  # training rows: not applicable
        calls.append(len(completions))
        return list(SCRIPT[len(calls) - 1])

    return CompositeReward([WeightedReward("len", length), WeightedReward("correctness", val)]), calls


def test_best_checkpoint_by_validation_correctness_is_kept_and_exported(tok_dir, tmp_path):  # noqa: F811
    from reasoner.checkpoint import RunCheckpoints, fingerprint
    from reasoner.models.export import export_hf
    from safetensors.numpy import load_file
    from trainers.run import merged_for_export

    cfg = tiny(tok_dir, "--config.grpo.max_new_tokens=4", "--config.optim.lr=0.05", "--config.train.num_steps=3",
               "--config.train.eval_every=1", "--config.train.keep_checkpoints=5",
               "--config.train.async_checkpoint=False", file="grpo_cedar.py")
    cfg.train.update(dict(eval_temperature=0.7, eval_top_p=0.95, eval_rewards=("correctness",),
                          best_metric="eval/correctness", export_best=True))
    cfg.export_dir = str(tmp_path / "export")
    examples = [{"prompt": [{"role": "user", "content": "say something"}]},
                {"prompt": [{"role": "user", "content": "one two three"}]}]
    held_out = [{"prompt": [{"role": "user", "content": "red blue"}], "split": "val"},
                {"prompt": [{"role": "user", "content": "dog cat"}], "split": "val"}]
    reward, calls = scripted_rewards()
    workdir = tmp_path / "run"
    result = grpo.train(cfg, workdir=workdir, examples=examples, eval_examples=held_out, reward=reward,
                        progress=False, mesh=one_device_mesh())
    reward.close()
    assert calls == [2, 2, 2]  # one sampled completion per held-out prompt, every step
    assert [e["step"] for e in result.eval_history] == [1, 2, 3]
    assert [e["eval/correctness"] for e in result.eval_history] == [np.mean(s) for s in SCRIPT]
    assert all(e["eval/count"] == 2 and "eval/len" not in e for e in result.eval_history)
    assert all(np.isfinite(h["loss"]) for h in result.history)

    meta = {"trainer": "grpo", "fingerprint": fingerprint(result.state)}
    ckpt = RunCheckpoints(workdir, best_metric="eval/correctness", best_mode="max", async_save=False)
    assert ckpt.best_step() == 2
    best, _, best_meta = ckpt.restore(result.state, expected_meta=meta, which="best")
    at_2, _, _ = ckpt.restore(result.state, expected_meta=meta, step=2)
    ckpt.close()
    assert best_meta["step"] == 2
    jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, best.params),
                 jax.tree.map(np.asarray, at_2.params))
    final = jax.tree.leaves(jax.tree.map(np.asarray, result.state.params))
    assert any(not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(jax.tree.map(np.asarray, best.params)),
                                                       final))  # the best is not the last step's state

    # export_best: the exported weights are the best checkpoint's (exported here independently), not the final's
    run = result.run
    export_hf(merged_for_export(run, best.params), str(tmp_path / "want_best"), tokenizer=run.tokenizer)
    export_hf(merged_for_export(run, result.state.params), str(tmp_path / "want_final"), tokenizer=run.tokenizer)
    got = load_file(str(tmp_path / "export" / "model.safetensors"))
    want = load_file(str(tmp_path / "want_best" / "model.safetensors"))
    last = load_file(str(tmp_path / "want_final" / "model.safetensors"))
    assert got.keys() == want.keys()
    for name in got:
        np.testing.assert_array_equal(got[name], want[name])
    assert any(not np.array_equal(got[n], last[n]) for n in got)


def test_eval_settings_are_checked_with_one_line_errors(tok_dir):  # noqa: F811
    cfg = tiny(tok_dir, file="grpo_cedar.py")
    names = ("correctness", "coverage")
    cases = [
        (dict(eval_temperature=-1.0), "train.eval_temperature=-1.0"),
        (dict(eval_top_p=0.0), "train.eval_top_p=0.0"),
        (dict(export_best=True, best_metric=""), "train.export_best=True needs train.best_metric"),
        (dict(eval_rewards=("judge",)), "train.eval_rewards=['judge']"),
        (dict(best_metric="eval/coverage", eval_rewards=("correctness",)), "train.best_metric='eval/coverage'"),
    ]
    for changes, message in cases:
        c = tiny(tok_dir, file="grpo_cedar.py")
        c.train.update(changes)
        with pytest.raises(ValueError) as err:
            grpo_eval.EvalSettings.from_config(c).metric_names(names)
        assert str(err.value).startswith(message) and "\n" not in str(err.value), err.value
    ok = grpo_eval.EvalSettings.from_config(cfg)  # the CEDAR configs: sampled, correctness only, best by it
    assert ok.metric_names(names) == ("eval/reward", "eval/correctness") and ok.temperature == 0.7
    cfg.train.eval_rewards = ()
    assert grpo_eval.EvalSettings.from_config(cfg).metric_names(names) == ("eval/reward", "eval/correctness",
                                                                           "eval/coverage")
