"""`reasoner serve` as a process (slow: a fresh JAX process): serving an exported checkpoint directory, its log
lines, SIGTERM finishing the request in flight before a clean exit, and flags checked before any loading."""

import dataclasses
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from reasoner.cli import main
from tests.models_shared import TINY, random_decoder

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory, tokenizer):
    from reasoner.models.export import export_hf

    path = tmp_path_factory.mktemp("served") / "export"
    export_hf(random_decoder(dataclasses.replace(TINY, tie_embeddings=False), seed=3), str(path))
    tokenizer.save_pretrained(str(path))
    return path


def _start(export_dir):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "reasoner.cli", "serve", "--model", str(export_dir), "--port", "0",
                             "--max-len", "128", "--batch-wait-ms", "50"], stderr=subprocess.PIPE, text=True, env=env)
    lines: list[str] = []

    def read():
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        url = next((m.group(1) for line in lines if (m := re.search(r" at (http://127\.0\.0\.1:\d+/v1)", line))), None)
        if url:
            return proc, url, lines
        time.sleep(0.2)
    proc.kill()
    pytest.fail("reasoner serve did not start:\n" + "\n".join(lines[-20:]))


def test_serves_an_export_and_finishes_in_flight_work_on_sigterm(export_dir, tokenizer):
    from openai import OpenAI

    from reasoner.models import load_model
    from reasoner.sampling import Sampler, SamplingParams
    from reasoner.tokenization import chat_ids

    proc, url, lines = _start(export_dir)
    try:
        client = OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=300)
        assert [m.id for m in client.models.list().data] == ["export"]
        messages = [{"role": "user", "content": "hello"}]
        out = client.chat.completions.create(model="export", messages=messages, temperature=0, max_tokens=6)
        (want,) = Sampler(load_model(str(export_dir)), tokenizer).generate(
            [chat_ids(tokenizer, messages)], SamplingParams(temperature=0.0, max_new_tokens=6))
        assert out.choices[0].message.content == want.text  # the directory's weights are what is served
        late = {}
        asker = threading.Thread(target=lambda: late.setdefault("answer", client.chat.completions.create(
            model="export", messages=messages, temperature=0, max_tokens=40)))
        asker.start()
        time.sleep(1.0)  # the request is sent at once; 40 new tokens need a fresh compile (seconds): still in flight
        proc.send_signal(signal.SIGTERM)
        asker.join(120)
        assert proc.wait(120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert late["answer"].usage.completion_tokens == 40  # the request in flight was answered before exit
    assert any("SIGTERM: finishing queued requests" in line for line in lines)
    assert lines[-1].endswith("shut down")
    assert any(re.search(r"request of 1 rows: 6 tokens", line) for line in lines)  # the paged engine, the default


def test_bad_flags_fail_in_one_line_before_loading(capsys):
    assert main(["serve", "--max-batch", "0"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("reasoner serve: error: --max-batch=0: expected an integer >= 1") and len(err.splitlines()) == 1
    assert main(["serve", "--model", "/nonexistent/dir"]) == 1
    assert "--model /nonexistent/dir: expected a preset" in capsys.readouterr().err
