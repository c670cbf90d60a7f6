"""`reasoner cedar eval --heldout`: held-out sets evaluated beside (or instead of) the mixture rows, each reported
with its task-native accuracy and the Wilson interval of the successes recomputed here from the written
completions through the held-out checker; bad names and limits are errors naming the flag."""

import json

from reasoner.cli import main
from reasoner.data.cedar_heldout import load_heldout, score
from reasoner.metrics.intervals import wilson_interval
from reasoner.pipelines.cedar_eval import CedarEvalResult, format_table


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
