"""The A* cost ("max" | "sum", App. A.2) is one key, `data.cost`, from the pipeline's config to its SFT traces and
its GRPO rewards. On real ProofWriter theories (multi-premise rules, where the two costs order the search
differently; DeepRD's unary chains never do) the written traces differ exactly where host A* searches differ, and
each trace is the one the A* reward of its own cost scores as a perfect search (Eq. 7 = 1)."""

from __future__ import annotations

import json
import pathlib

import pytest

from reasoner.config import load_config
from reasoner.data.jsonl import write_jsonl
from reasoner.data.proofwriter_english import load_logic_llm
from reasoner.data.proofwriter_examples import logic_llm_records
from reasoner.pipelines.astar import build_data, grpo_config
from search.astar import solve
from search.parse import parse_trace
from search.rewards import ProblemScorer

CONFIGS = pathlib.Path(__file__).resolve().parents[1] / "configs"


@pytest.fixture(scope="module")
def records_dir(shared_data, tmp_path_factory):
    questions, _ = load_logic_llm(shared_data / "proofwriter" / "logic_llm_owa_d5_dev.json")
    records = list(logic_llm_records(questions[:200]))
    assert len(records) >= 60
    out = tmp_path_factory.mktemp("records")
    for split, rows in (("train", records[:30]), ("validation", records[30:40]), ("test", records[40:])):
        write_jsonl(out / f"{split}.jsonl", rows)
    return out


@pytest.mark.parametrize("heuristic", ["dependency", "true"])
def test_sum_cost_traces_differ_where_the_search_differs(records_dir, tmp_path, heuristic):
    overrides = [f"--config.data.records={records_dir}", "--config.data.dataset=proofwriter", "--config.data.train=0",
                 "--config.data.validation=0", "--config.data.test=0"]
    built = {}
    for cost in ("max", "sum"):
        config = load_config(f"{CONFIGS / 'astar_demo.py'}:tiny", [*overrides, f"--config.data.cost={cost}"])
        config.data.heuristic = heuristic  # (an override "=true" would read as the bool True)
        built[cost] = build_data(config, out_dir=tmp_path / cost)
    differ = 0
    for split in ("train", "validation", "test"):
        written = {c: [json.loads(x)["completion"] for x in (tmp_path / c / "sft" / f"{split}.jsonl").read_text()
                       .splitlines()] for c in built}
        for i, p in enumerate(built["max"][split]["problems"]):
            searches = {c: solve(p.program, p.goal, heuristic=heuristic, cost=c).trace for c in built}
            assert (written["max"][i] != written["sum"][i]) == (searches["max"] != searches["sum"]), p.id
            differ += written["max"][i] != written["sum"][i]
            for cost, text in ((c, written[c][i]) for c in built):
                steps = parse_trace(text, p.verbalizer).steps
                reward = ProblemScorer(p.program, p.goal, cost=cost).score_steps(steps).rewards
                assert reward[f"astar_{heuristic}"] == pytest.approx(1.0), (p.id, cost)
    assert differ >= 1  # the real theories hold problems the two costs search differently


def test_data_cost_is_the_one_key_of_traces_and_rewards():
    demo = load_config(f"{CONFIGS / 'astar_demo.py'}:cpu", ["--config.data.cost=sum"])
    assert [r["options"]["cost"] for r in grpo_config(demo).rewards] == ["sum"]
    assert [r["options"]["cost"] for r in grpo_config(load_config(f"{CONFIGS / 'astar_demo.py'}:cpu")).rewards] == [
        "max"]
    paper = load_config(f"{CONFIGS / 'astar_paper.py'}:llama1b_deeprd_grpo_astar_true", ["--config.data.cost=sum"])
    rewards = grpo_config(paper).rewards
    assert [(r["options"]["reward"], r["options"]["cost"], r["options"]["device"]) for r in rewards] == [
        ("astar_true", "sum", True)]
