"""App. E's counting process metrics through a judge (`reasoner.judges.process`): the prompts equal the paper's
E.4 blocks (compared with the paper's text, spaces and quote marks aside) with the Table 11 note of the dataset,
a reply's count is the number of listed items, and a malformed reply or a failed call counts nothing, is counted,
and never raises; `reasoner cedar eval --judged-process` reports the judged means per held-out set."""

import json
import pathlib
import random
import re

import pytest

from reasoner.judges import JudgeCounters
from reasoner.judges.process import count_traces, judged_process_counts, parse_count, process_messages
from reasoner.judges.process_prompts import METRICS, NOTES, SYSTEM, TRACE, USER

PAPER = pathlib.Path(__file__).resolve().parents[3] / "shared/papers/cedar_grpo.txt"


def _norm(text):
    return re.sub(r"\s+", "", text).replace("‘", "'").replace("’", "'").replace("`", "'")


def _reply(n, *, wrap=lambda s: s):
    items = [{"excerpt": f"quote {k}", "explanation": "why"} for k in range(n)]
    return "I read the trace.\n" + wrap(json.dumps({"overall_analysis": "ok", "examples": items}))


def test_prompts_are_the_papers_blocks_and_notes():
    if not PAPER.is_file():
        pytest.skip(f"paper text not found at {PAPER}")
    text = PAPER.read_text()
    blocks = re.split(r"#### E\.4\.\d", text[text.index("#### E.4.1"):text.index("#### E.4.6")])[1:]
    assert len(blocks) == len(METRICS) == 5
    for metric, block in zip(METRICS, blocks):  # E.4.1-E.4.5 are in METRICS' order
        system, user = block.split("System Prompt:")[1].split("User Prompt Template:")
        assert _norm(system) == _norm(SYSTEM[metric])
        assert _norm(user) == _norm(USER[metric] + TRACE)
    table11 = _norm(text[text.index("Table 10:"):text.index("Table 11:Dataset-specific notes for all process-level "
                                                             "metrics injected into the judge prompt. Each cell "
                                                             "gives the exact text appended to the shared system "
                                                             "prompt for that dataset. (continued)")])
    for notes in NOTES.values():
        for note in notes.values():
            assert _norm(note) in table11


def test_messages_carry_the_dataset_note_and_trace():
    msgs = process_messages("backtracking", dataset="defeasible_nli", trace="Wait, that's wrong.")
    assert NOTES["DefNLI"]["backtracking"] in msgs[0]["content"] and "{" + "dataset_specific_note}" not in msgs[0][
        "content"]
    assert msgs[1]["content"].startswith("Dataset: DefNLI\n")
    assert msgs[1]["content"].endswith("<reasoning_trace>\nWait, that's wrong.\n</reasoning_trace>")
    assert NOTES["MuSR"]["prior_invocation"] in process_messages("prior_invocation", dataset="musr_team",
                                                                 trace="t")[0]["content"]
    assert NOTES["B-COPA"]["branchiness"] in process_messages("branchiness", dataset="ecare", trace="t")[0]["content"]
    uni = process_messages("uncertainty_markers", dataset="uniadilr", trace="t")
    assert "(none: UniADILR has no dataset-specific note" in uni[0]["content"]
    assert uni[1]["content"].startswith("Dataset: UniADILR\n")
    with pytest.raises(ValueError, match="process metric 'hedges'"):
        process_messages("hedges", dataset="ecare", trace="t")


def test_parse_counts_items_and_rejects_malformed_replies():
    assert parse_count(_reply(3)) == (3, "")
    assert parse_count(_reply(0)) == (0, "")
    assert parse_count(_reply(2, wrap=lambda s: f"```json\n{s}\n```\nDone.")) == (2, "")
    assert parse_count('{"examples": [{"excerpt": "a", "explanation": "b"},]}') == (1, "")  # trailing comma
    # The verdict is the last object holding the key, not an example quoted earlier in the prose.
    assert parse_count('e.g. {"examples": []} then ' + json.dumps({"examples": [{"excerpt": "x"}] * 4})) == (4, "")
    for bad, why in [("", "empty reply"), (None, "reply is NoneType"), ("No JSON at all.", "no JSON object"),
                     ('{"examples": "many"}', "examples is str"), ('{"examples": [{"explanation": "no quote"}]}',
                                                                    "examples[0] is not an object"),
                     ('{"examples": [{"excerpt": "cut', "no JSON object"), ('{"examples": [1, 2]}', "examples[0]")]:
        count, reason = parse_count(bad)
        assert count is None and why in reason
    rng = random.Random(0)
    for _ in range(300):  # arbitrary text never raises
        text = "".join(rng.choice('{}[]":,\\ examplesxcerpt0') for _ in range(rng.randint(0, 80)))
        count, reason = parse_count(text)
        assert (count is None) == bool(reason)


class _Stub:
    """A judge answering per metric, told apart by the heading of its system prompt; None is a failed call."""

    judge_id = "stub"
    REPLIES = {"What is an Uncertainty Marker?": _reply(2), "What is Branchiness?": "No JSON, sorry.",
               "What is Backtracking?": _reply(0),
               "What is Differential Elimination?": _reply(1, wrap=lambda s: f"```json\n{s}\n```"),
               "What is a Prior?": None}

    def reply(self, prompts):
        return [next(v for k, v in self.REPLIES.items() if k in p[0]["content"]) for p in prompts]


def test_counts_per_metric_with_malformed_and_failed_replies_counted():
    counters = {m: JudgeCounters() for m in METRICS}
    counts = judged_process_counts(_Stub(), [("musr_murder", "t1"), ("uniadilr", "t2"), ("ecare", "t3")], counters)
    assert counts == [{"uncertainty_markers": 2, "branchiness": None, "backtracking": 0,
                       "differential_elimination": 1, "prior_invocation": None}] * 3
    assert (counters["uncertainty_markers"].valid, counters["uncertainty_markers"].invalid) == (3, 0)
    assert (counters["branchiness"].invalid, counters["branchiness"].last_reason[:20]) == (3, "no JSON object with ")
    assert (counters["prior_invocation"].failed, counters["prior_invocation"].invalid) == (3, 0)
    assert counters["backtracking"].requests == 3 and counters["backtracking"].valid == 3

    class Short(_Stub):
        def reply(self, prompts):
            return super().reply(prompts)[:-1]

    with pytest.raises(ValueError, match="returned 1 replies for 2 prompts"):
        count_traces(Short(), "backtracking", [process_messages("backtracking", dataset="ecare", trace="t")] * 2)
