"""`reasoner smt rollout` against a local OpenAI-compatible stub teacher, end to end."""

import http.server
import json
import threading

import pytest

from reasoner.cli import main

REFUTATION = """(declare-sort Thing 0)
(declare-const max Thing)
(declare-fun yumpus (Thing) Bool)
(declare-fun dumpus (Thing) Bool)
(declare-fun wumpus (Thing) Bool)
(declare-fun impus (Thing) Bool)
(declare-fun tumpus (Thing) Bool)
(declare-fun sour (Thing) Bool)
(assert (forall ((x Thing)) (=> (yumpus x) (dumpus x))))
(assert (forall ((x Thing)) (=> (dumpus x) (wumpus x))))
(assert (forall ((x Thing)) (=> (wumpus x) (impus x))))
(assert (forall ((x Thing)) (=> (impus x) (tumpus x))))
(assert (forall ((x Thing)) (=> (tumpus x) (not (sour x)))))
(assert (yumpus max))
(assert (sour max))
(check-sat)"""


class Teacher(http.server.BaseHTTPRequestHandler):
    """Turn 1: a z3_solve call (a real refutation for "Max is sour", a trivial script otherwise).
    Turn 2: finish with B."""

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        messages = body["messages"]
        if messages[-1]["role"] == "user":
            code = REFUTATION if "Max is sour" in messages[-1]["content"] else "(assert true)(check-sat)"
            call = {"id": "1", "type": "function", "function": {"name": "z3_solve",
                                                                 "arguments": json.dumps({"smt_code": code})}}
            message = {"role": "assistant", "content": "Let me check.", "tool_calls": [call]}
        else:
            message = {"role": "assistant", "content": '<tool_call>{"name": "finish", "arguments": {"answer": "B"}}</tool_call>'}
        data = json.dumps({"choices": [{"message": message}], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def endpoint():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Teacher)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def test_rollout_writes_curated_rows_pairs_and_metrics(shared_data, endpoint, tmp_path, capsys):
    out, dpo = tmp_path / "rows.jsonl", tmp_path / "pairs.jsonl"
    code = main(["smt", "rollout", "--dataset", "prontoqa", "--data-root", str(shared_data), "--limit", "2",
                 "--samples", "2", "--endpoint", endpoint, "--model", "teacher", "--timeout", "10",
                 "--out", str(out), "--dpo-out", str(dpo)])
    assert code == 0
    metrics = json.loads(capsys.readouterr().out)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["problem_id"], r["label"], r["correct"]) for r in rows] == [
        ("ProntoQA_1", "gold", True), ("ProntoQA_1", "gold", True),
        ("ProntoQA_2", "rejected", False), ("ProntoQA_2", "rejected", False)]  # ProntoQA_2's answer is A
    assert rows[0]["metadata"]["verdicts"] == ["unsat"] and rows[0]["metadata"]["tokens"] == {"prompt": 10, "completion": 4}
    assert rows[2]["reasons"] == ["wrong_answer"] and rows[2]["gold_answer"] == "A"
    assert metrics["labels"] == {"gold": 2, "silver": 0, "rejected": 2}
    assert metrics["problems"] == 2 and metrics["accuracy"] == 0.5 and metrics["vcr_unsat"] == 0.5
    assert metrics["any_nontrivial"] == 0.5
    assert dpo.read_text() == ""  # no problem has both a gold and a contrastive trace
