"""Every variant of configs/astar_paper.py starts its pipeline through `reasoner train` (the command the launch
scripts run), with tiny-sized overrides: a random 2-layer model with SmolLM2's tokenizer, a few problems, a few
steps, 8 new tokens. ProofWriter variants read the TFDS data `reasoner data build proofwriter` writes: from the raw
release that is the registered config `proofwriter_astar/owa_depth5` the paper configs name (checked by name; the
release is not in ../shared/data), here the Logic-LLM OWA depth-5 questions of ../shared/data under the name the
build prints. GRPO variants start from an SFT export (model.name = a directory holding weights and tokenizer
files, nothing else).

Each run is its own one-device subprocess (a few minutes on 2 cores), so the suite runs three (the two below plus the
SFT export the GRPO one starts from), which cover both datasets and both stages, while every one of the 28 variants is
resolved in-process with the same overrides into the trainer configs its pipeline builds, with its data source and
rewards checked (`test_every_paper_variant_resolves_to_its_pipeline`). `REASONER_PAPER_VARIANTS=all` runs all 28
end to end (about an hour on 2 cores). The name agreement of the ProofWriter data is checked always.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "configs"
ONE_DEVICE_ENV = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=1"}
TINY = ["--config.model.name=", "--config.model.tokenizer=smollm2-135m-instruct", "--config.model.dtype=float32",
        "--config.model.remat=False", "--config.data.train=8", "--config.data.validation=2", "--config.data.test=2",
        "--config.sft.data.seq_len=512", "--config.sft.train.batch_size=2", "--config.sft.train.num_epochs=1",
        "--config.grpo.grpo.num_generations=2", "--config.grpo.grpo.max_new_tokens=8", "--config.grpo.train.num_steps=1",
        "--config.eval.max_new_tokens=8", "--config.eval.batch_size=2"]


DEEPRD_SMALL = ["--config.data.min_lookahead=2", "--config.data.max_lookahead=3", "--config.data.min_branches=2",
                "--config.data.max_branches=3", "--config.data.extra_ratio=0.0", "--config.data.max_degree=3"]


REPRESENTATIVE = ("llama1b_proofwriter_sft_true", "llama3b_deeprd_grpo_astar_dependency")


def _variants():
    from configs import astar_paper

    return astar_paper.variants()


def _run_variants():
    return _variants() if os.environ.get("REASONER_PAPER_VARIANTS") == "all" else list(REPRESENTATIVE)


@pytest.mark.parametrize("variant", _variants())
def test_every_paper_variant_resolves_to_its_pipeline(variant, tmp_path):
    from reasoner.cli.train import target_of
    from reasoner.config import load_config
    from reasoner.pipelines.astar import grpo_config, sft_config
    from reasoner.rewards.registry import build_reward

    spec = f"{CONFIGS / 'astar_paper.py'}:{variant}"
    config = load_config(spec, TINY)
    assert target_of(config, spec) == ("pipeline", "astar")
    model, dataset, stage, which = variant.split("_", 3)
    assert config.data.dataset == dataset and config.sft.enabled == (stage == "sft")
    assert config.grpo.enabled == (stage == "grpo")
    if dataset == "proofwriter":
        assert config.data.tfds_name == "proofwriter_astar/owa_depth5"
    sft = sft_config(config, export_dir=tmp_path / "export")
    assert sft.trainer == "sft" and sft.data.seq_len == 512 and sft.train.batch_size == 2
    if stage == "sft":
        assert config.data.heuristic == which  # the search order whose traces the SFT learns
    else:
        # the paper's SFT variant for this model and dataset, run with --workdir checkpoints/<variant>, exports there
        sft_variant = f"{model}_{dataset}_sft_{'true' if dataset == 'proofwriter' else 'dependency'}"
        default = load_config(f"{CONFIGS / 'astar_paper.py'}:{variant}", [])
        assert default.model.name == f"checkpoints/{sft_variant}/sft/export"
        grpo = grpo_config(config)
        assert grpo.trainer == "grpo" and grpo.train.num_steps == 1 and grpo.grpo.num_generations == 2
        for reward in grpo.rewards:  # every reward the variant names builds from the registry
            build_reward(reward["name"], **dict(reward.get("options", {})))
        assert which in {r.get("as", r["name"]) for r in grpo.rewards} | {
            r.get("options", {}).get("heuristic") and f"astar_{r['options']['heuristic']}" for r in grpo.rewards}


def _reasoner(*args, timeout=2400):
    proc = subprocess.run([sys.executable, "-m", "reasoner.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=ONE_DEVICE_ENV)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


def test_the_paper_proofwriter_build_is_the_config_the_paper_variants_read(tmp_path):
    from configs import astar_paper
    from reasoner.cli.data import proofwriter_config_name
    from reasoner.data.tfds_builders import ProofwriterAstar

    paper = {"source": "raw", "world": "OWA", "depth_dir": "depth-5", "min_depth": 3, "files": {},
             "manual_dir": "/data/proofwriter-dataset-V2020.12.3"}
    name = proofwriter_config_name(paper)
    builder = ProofwriterAstar(config=name, data_dir=str(tmp_path))  # what the build prepares, by that name
    assert f"{builder.name}/{builder.builder_config.name}" == "proofwriter_astar/owa_depth5"
    assert astar_paper.get_config("llama1b_proofwriter_sft_true").data.tfds_name == "proofwriter_astar/owa_depth5"
    assert proofwriter_config_name({**paper, "source": "logic-llm"}) != name  # other content, another name


@pytest.fixture(scope="module")
def proofwriter_tfds(shared_data, tmp_path_factory):
    """(TFDS data dir, tfds name) of the Logic-LLM OWA depth-5 questions built by `reasoner data build`."""
    data_dir = tmp_path_factory.mktemp("tfds")
    dev = shared_data / "proofwriter" / "logic_llm_owa_d5_dev.json"
    out = _reasoner("data", "build", "proofwriter", "--source", "logic-llm", "--data-dir", str(data_dir),
                    *[f"--file={split}={dev}" for split in ("train", "validation", "test")])
    built = json.loads(out.stdout.strip().splitlines()[-1])
    return data_dir, f"{built['dataset']}/{built['config']}"


@pytest.fixture(scope="module")
def sft_export(tmp_path_factory):
    """The export of a tiny SFT paper variant: what a GRPO variant's model.name points at."""
    workdir = tmp_path_factory.mktemp("sft_run")
    _reasoner("train", "--config", f"{CONFIGS / 'astar_paper.py'}:llama1b_deeprd_sft_dependency", "--workdir",
              str(workdir), "--no-progress", *TINY, *DEEPRD_SMALL)
    export = workdir / "sft" / "export"
    assert (export / "tokenizer_config.json").is_file() and (export / "config.json").is_file()
    return export


@pytest.mark.slow
@pytest.mark.timeout(3000)  # a pipeline subprocess, plus the SFT export's own run for the GRPO variants
@pytest.mark.parametrize("variant", _run_variants())
def test_paper_variant_starts_its_pipeline(variant, request, tmp_path):
    model, dataset, stage, which = variant.split("_", 3)
    extra = []
    if dataset == "deeprd":  # the demo's small DeepRD graphs: the paper's (L 5..10, B 4..8) exceed tiny seq_len
        extra += DEEPRD_SMALL
    if dataset == "proofwriter":
        data_dir, name = request.getfixturevalue("proofwriter_tfds")
        extra += [f"--config.data.tfds_dir={data_dir}", f"--config.data.tfds_name={name}"]
    if stage == "sft":  # the paper's 10- / 5-shot baseline, from the 8 training problems here
        extra += ["--config.eval.few_shot=2"]
    if stage == "grpo":  # the SFT export alone: its tokenizer files, no model.tokenizer
        extra += [f"--config.model.name={request.getfixturevalue('sft_export')}", "--config.model.tokenizer="]
    out = _reasoner("train", "--config", f"{CONFIGS / 'astar_paper.py'}:{variant}", "--workdir", str(tmp_path),
                    "--no-progress", *TINY, *extra)
    doc = json.loads((tmp_path / "report" / "astar.json").read_text())
    trained = "SFT" if stage == "sft" else "SFT+GRPO"
    labels = [m["label"] for m in doc["models"]]
    assert labels[:-1] == (["base", "base (2-shot)"] if stage == "sft" else ["base"]) and doc["complete"] is True
    assert labels[-1].split(" ")[0] == trained
    assert all(m["examples"] == 2 for m in doc["models"]) and doc["table"] in out.stdout
    assert (tmp_path / stage / "metrics.jsonl").is_file()
