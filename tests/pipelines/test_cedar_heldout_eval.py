"""`reasoner cedar eval --heldout`: held-out sets evaluated beside (or instead of) the mixture rows, each reported
with its task-native accuracy and the Wilson interval of the successes recomputed here from the written
completions through the held-out checker; bad names and limits are errors naming the flag. `--judged-process`
reports App. E's judged counts per held-out set from a stub judge, malformed replies counted and left out."""

import json

from reasoner.cli import main
from reasoner.data.cedar_heldout import load_heldout, score
from reasoner.metrics.intervals import wilson_interval
from reasoner.pipelines.cedar_eval import CedarEvalResult, format_table
from tests.chat_stub import ChatStub, serve


def test_cedar_eval_heldout_accuracy_per_dataset(shared_data, tokenizer, tmp_path, capsys):
    from reasoner.models.export import export_hf
    from tests.models_shared import TINY, random_decoder

    model_dir = export_hf(random_decoder(TINY, seed=1, scale=4.0), str(tmp_path / "tiny"), tokenizer=tokenizer)
    capsys.readouterr()
    code = main(["cedar", "eval", "--model", model_dir, "--data-dir", str(shared_data), "--validation-scale", "0",
                 "--sources", "crypto", "--heldout", "ecare,defeasible_nli,musr_team", "--heldout-limit", "2",
                 "--no-judge", "--max-new-tokens", "4", "--batch-size", "4",
                 "--completions-out", str(tmp_path / "c.jsonl"), "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    written = [json.loads(x) for x in (tmp_path / "c.jsonl").read_text().splitlines()]
    assert report["sources"] == {} and report["overall"] is None
    assert sorted(report["heldout"]) == ["defeasible_nli", "ecare", "musr_team"]
    for name, got in report["heldout"].items():
        examples = load_heldout(name, data_dir=shared_data)[:2]
        mine = [w for w in written if w["source"] == name]
        assert [w["uid"] for w in mine] == [f"heldout/{name}/{ex.id}" for ex in examples]
        correct = int(sum(score(ex, w["completion"]) for ex, w in zip(examples, mine)))
        ref = wilson_interval(correct, 2)
        assert (got["n"], got["correct"]) == (2, correct)
        assert (got["accuracy"]["low"], got["accuracy"]["high"]) == (ref.low, ref.high)
        assert set(got["process"]) == {"uncertainty_markers", "backtracking", "branchiness"}
    table = format_table([CedarEvalResult("tiny", report, written)])
    assert "| heldout:ecare | tiny | 2 |" in table and "| heldout:musr_team | tiny | 2 |" in table
    for bad, message in ((["--heldout", "art"], "held-out dataset 'art'"),
                         (["--heldout", "ecare", "--heldout-limit", "-1"], "--heldout-limit=-1")):
        assert main(["cedar", "eval", "--model", model_dir, "--data-dir", str(shared_data), *bad]) == 2
        assert message in capsys.readouterr().err


def _items(n):
    return json.dumps({"overall_analysis": "ok", "examples": [{"excerpt": "q", "explanation": "e"}] * n})


class _Judge(ChatStub):
    """Coverage / directionality verdicts for training rows; per process metric: 2 items, prose only (malformed),
    0 items, 1 item in a fence, examples not a list (malformed)."""

    PROCESS = {"What is an Uncertainty Marker?": _items(2), "What is Branchiness?": "No JSON here.",
               "What is Backtracking?": _items(0), "What is Differential Elimination?": f"```\n{_items(1)}\n```",
               "What is a Prior?": '{"examples": "none"}'}

    def reply(self, body):
        system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
        if "observation-coverage" in user:
            text = json.dumps({"observation_details": [{"detail": "a", "addressed": True, "evidence": "x"}]})
        elif "Directionality" in system and "directionality_score" in system:
            text = json.dumps({"directionality_score": 1.0, "explanation": "ok"})
        else:
            text = next(v for k, v in self.PROCESS.items() if k in system)
        return 200, {"choices": [{"message": {"role": "assistant", "content": text}}]}


def test_cedar_eval_judged_process_metrics(shared_data, tokenizer, tmp_path, capsys):
    from reasoner.models.export import export_hf
    from tests.models_shared import TINY, random_decoder

    model_dir = export_hf(random_decoder(TINY, seed=2, scale=4.0), str(tmp_path / "tiny"), tokenizer=tokenizer)
    capsys.readouterr()
    with serve(_Judge) as url:
        code = main(["cedar", "eval", "--model", model_dir, "--data-dir", str(shared_data), "--sources", "crypto",
                     "--validation-scale", "0.025", "--heldout", "defeasible_nli", "--heldout-limit", "2",
                     "--judge-endpoint", url, "--judged-process", "--max-new-tokens", "4", "--batch-size", "4",
                     "--json"])
        bodies = list(_Judge.bodies)
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    # One crypto validation row is judged for coverage and directionality; the 2 held-out rows are not.
    assert sum("observation-coverage" in b["messages"][-1]["content"] for b in bodies) == 1
    assert len(bodies) == 2 + 5 * 3 and report["sources"]["crypto"]["coverage"]["estimate"] == 1.0
    expected = {"uncertainty_markers": (2.0, 2), "branchiness": (None, 0), "backtracking": (0.0, 2),
                "differential_elimination": (1.0, 2), "prior_invocation": (None, 0)}
    got = report["heldout"]["defeasible_nli"]["process_judged"]
    assert {m: (v["mean"], v["valid"]) for m, v in got.items()} == expected
    assert all(v["n"] == 2 for v in got.values())
    assert report["sources"]["crypto"]["process_judged"]["uncertainty_markers"] == {"mean": 2.0, "valid": 1, "n": 1}
    counters = report["judge"]["process"]
    assert (counters["branchiness"]["invalid"], counters["prior_invocation"]["invalid"]) == (3, 3)
    assert counters["uncertainty_markers"]["valid"] == 3 and counters["backtracking"]["failed"] == 0
    assert main(["cedar", "eval", "--model", model_dir, "--data-dir", str(shared_data), "--heldout", "ecare",
                 "--no-judge", "--judged-process"]) == 2
    assert "--judged-process needs a judge" in capsys.readouterr().err
