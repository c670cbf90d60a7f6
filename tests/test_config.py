"""Config files, variants and `--config.a.b=v` overrides (reasoner.config)."""

import pathlib

import ml_collections
import pytest

from reasoner.config import ConfigKeyError, apply_overrides, load_config, parse_value, split_overrides

CONFIGS = pathlib.Path(__file__).resolve().parents[1] / "configs"
TRAINER_CONFIGS = {
    "sft_astar.py": (None, "smollm2", "llama1b", "llama3b", "deeprd", "tiny"),
    "dpo_smt.py": (None, "smollm2", "paper", "tiny"),
    "sft_smt.py": (None, "smollm2", "paper", "tiny"),
}


@pytest.mark.parametrize("name,variant", [(n, v) for n, vs in TRAINER_CONFIGS.items() for v in vs])
def test_every_trainer_config_variant_builds(name, variant):
    spec = str(CONFIGS / name) + (f":{variant}" if variant else "")
    config = load_config(spec)
    assert isinstance(config, ml_collections.ConfigDict)
    for section in ("model", "data", "optim", "train"):
        assert section in config, f"{spec} lacks {section}"


def test_every_config_file_with_get_config_builds_its_default():
    for path in sorted(CONFIGS.glob("*.py")):
        if path.name.startswith("_") or "def get_config" not in path.read_text():
            continue
        assert isinstance(load_config(str(path)), ml_collections.ConfigDict), path


def test_paper_hyperparameters():
    sft = load_config(str(CONFIGS / "sft_astar.py"))
    assert (sft.optim.lr, sft.optim.schedule, sft.optim.warmup_ratio, sft.train.num_epochs) == (2e-5, "cosine", 0.03, 3)
    assert (sft.optim.b1, sft.optim.b2) == (0.9, 0.999)
    dpo = load_config(str(CONFIGS / "dpo_smt.py"))
    assert (dpo.dpo.beta, dpo.optim.lr, dpo.optim.warmup_ratio, dpo.optim.schedule, dpo.train.num_epochs) == (
        0.1, 5e-7, 0.1, "cosine", 2)
    assert dpo.dpo.loss_type == "sigmoid" and dpo.optim.weight_decay == 0.0 and dpo.optim.max_grad_norm == 1.0
    smt = load_config(str(CONFIGS / "sft_smt.py") + ":paper")  # Sequent-Prover App. C
    assert (smt.optim.name, smt.optim.lr, smt.optim.schedule, smt.optim.warmup_ratio, smt.optim.weight_decay,
            smt.optim.max_grad_norm) == ("adamw", 3e-6, "cosine", 0.03, 0.0, 1.0)
    assert (smt.train.num_epochs, smt.train.batch_size * smt.train.grad_accum, smt.data.seq_len, smt.data.packing,
            smt.train.checkpoint_every, smt.train.keep_checkpoints) == (2, 64, 16384, True, 10, 3)


def test_overrides_keep_types_and_reach_nested_keys():
    config = load_config(str(CONFIGS / "sft_astar.py") + ":tiny",
                         ["--config.optim.lr=1e-4", "--config.train.batch_size=2", "--config.data.packing=false",
                          "--config.optim.warmup_ratio=0", "--config.model.random.num_layers=3",
                          "--config.mesh=data=2,fsdp=4"])
    assert config.optim.lr == 1e-4 and config.train.batch_size == 2 and config.data.packing is False
    assert isinstance(config.optim.warmup_ratio, float) and config.optim.warmup_ratio == 0.0
    assert config.model.random.num_layers == 3 and config.mesh == "data=2,fsdp=4"


def test_unknown_key_lists_near_matches():
    config = load_config(str(CONFIGS / "sft_astar.py"))
    with pytest.raises(ConfigKeyError) as err:
        apply_overrides(config, ["--config.optim.learning_rate=1"])
    assert "optim.learning_rate" in str(err.value)
    with pytest.raises(ConfigKeyError, match=r"did you mean .*train\.batch_size"):
        apply_overrides(config, ["--config.train.batch_sise=1"])


def test_bad_override_values_and_specs():
    config = load_config(str(CONFIGS / "sft_astar.py"))
    with pytest.raises(ValueError, match="expected an integer"):
        apply_overrides(config, ["--config.train.batch_size=four"])
    with pytest.raises(ValueError, match="expected true or false"):
        apply_overrides(config, ["--config.data.packing=3"])
    with pytest.raises(ValueError, match="KEY=VALUE"):
        apply_overrides(config, ["--config.optim.lr"])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_config("configs/no_such_file.py:tiny")
    with pytest.raises(ValueError, match="unknown variant"):
        load_config(str(CONFIGS / "sft_astar.py") + ":huge")


def test_an_override_without_value_is_named_not_the_option_after_it(tmp_path):
    for argv in (["--config.model.name", "--workdir", "d"], ["--workdir", "d", "--config.model.name"]):
        with pytest.raises(ValueError, match="override --config.model.name: expected --config.model.name=VALUE"):
            split_overrides(argv)
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "reasoner.cli", "train", "--config", "configs/sft_astar.py:tiny",
                           "--config.model.name", "--workdir", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 2 and "override --config.model.name" in done.stderr
    done = subprocess.run([sys.executable, "-m", "reasoner.cli", "train", "--config", "configs/sft_astar.py:tiny",
                           "--workdir", "gs://bucket/run1"], capture_output=True, text=True)
    assert done.returncode == 2 and "is a URL; expected a filesystem path" in done.stderr
    for argv, message in ((["bench", "parsers", "--repeats", "0"], "--repeats: expected an integer > 0"),
                          (["data", "build", "deeprd", "--train", "-1"], "--train: expected an integer > 0"),
                          (["data", "build", "deeprd", "--test", "-1"], "--test: expected an integer >= 0")):
        done = subprocess.run([sys.executable, "-m", "reasoner.cli", *argv], capture_output=True, text=True)
        assert done.returncode == 2 and message in done.stderr, done.stderr


def test_parse_value_and_split_overrides():
    assert parse_value("true") is True and parse_value("None") is None and parse_value("[1, 2]") == [1, 2]
    assert parse_value("2e-5") == 2e-5 and parse_value("hello") == "hello"
    overrides, rest = split_overrides(["--workdir", "d", "--config.a=1", "--config.b", "2"])
    assert overrides == ["--config.a=1", "--config.b=2"] and rest == ["--workdir", "d"]


def test_every_config_names_what_reasoner_train_starts():
    """`config.trainer` or `config.pipeline` in every variant of every config file; never the file name."""
    from configs import astar_paper
    from reasoner.cli.train import PIPELINES, TRAINERS, target_of

    variants = {**TRAINER_CONFIGS, "grpo_astar.py": (None, "tiny", "proofwriter", "astar_true"),
                "grpo_cedar.py": (None, "paper", "tiny"), "astar_demo.py": (None, "tiny"),
                "astar_paper.py": tuple(astar_paper.variants()), "smt_demo.py": (None, "paper", "tiny")}
    expected = {"sft_astar.py": ("trainer", "sft"), "dpo_smt.py": ("trainer", "dpo"),
                "grpo_astar.py": ("trainer", "grpo"), "grpo_cedar.py": ("trainer", "grpo"),
                "astar_demo.py": ("pipeline", "astar"), "astar_paper.py": ("pipeline", "astar"),
                "sft_smt.py": ("trainer", "sft"), "smt_demo.py": ("pipeline", "smt")}
    for name, vs in variants.items():
        for v in vs:
            spec = str(CONFIGS / name) + (f":{v}" if v else "")
            assert target_of(load_config(spec), spec) == expected[name], spec
    assert set(TRAINERS) >= {"sft", "dpo", "grpo"} and "astar" in PIPELINES
    renamed = load_config(str(CONFIGS / "sft_astar.py"), ["--config.trainer=dpo"])
    assert target_of(renamed, "sft_astar.py") == ("trainer", "dpo")  # the config says, not the file name
    with pytest.raises(ValueError, match="expected one of"):
        target_of(load_config(str(CONFIGS / "sft_astar.py"), ["--config.trainer=ppo"]), "x")


def test_common_sections_refuse_unknown_fields():
    from configs import common

    assert common.optim(lr=3e-4).lr == 3e-4 and common.train(num_steps=7).num_steps == 7
    with pytest.raises(ValueError, match=r"configs.common.optim: unknown fields \['learning_rate'\]"):
        common.optim(learning_rate=1.0)
