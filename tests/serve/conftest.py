"""Fixtures for the server tests: a running `reasoner.serve` server (in a thread, real HTTP on a free 127.0.0.1
port) over a tiny random decoder (fast) or the embedded SmolLM2 (slow), its log lines, and an `openai` client."""

import dataclasses
import logging
import threading

import pytest

from tests.models_shared import TINY, random_decoder


class LogLines(logging.Handler):
    """Collects the `reasoner.serve` log messages of one server."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())

    def batches(self) -> list[str]:
        return [line for line in self.lines if line.startswith("batch of ")]


class Running:
    """A started server with its log, an `openai` client and its URL; `close()` shuts it down gracefully."""

    def __init__(self, server, log: LogLines):
        from openai import OpenAI

        self.server, self.log, self.url = server, log, server.url
        self.client = OpenAI(base_url=self.url, api_key="unused", max_retries=0, timeout=300)
        self.thread = threading.Thread(target=server.serve_forever, daemon=True)
        self.thread.start()

    def ask_at_once(self, requests: list[dict], *, join_s: float) -> list:
        """Sends every request (`chat.completions.create` keywords) at once, each from its own thread, and returns
        the answers in request order; a client error fails the test."""
        answers, errors = {}, []

        def ask(i):
            try:
                answers[i] = self.client.chat.completions.create(**requests[i])
            except Exception as err:  # noqa: BLE001 - asserted below
                errors.append(err)

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(requests))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(join_s)
        assert not errors and sorted(answers) == list(range(len(requests))), errors
        return [answers[i] for i in range(len(requests))]

    def close(self):
        self.server.close_gracefully(timeout=60)
        self.thread.join(60)
        logging.getLogger("reasoner.serve").removeHandler(self.log)


def start_server(model, tokenizer, **kwargs) -> Running:
    from reasoner.serve import build_server

    log = LogLines()
    logger = logging.getLogger("reasoner.serve")
    logger.addHandler(log)
    logger.setLevel(logging.INFO)
    kwargs.setdefault("model_name", "test-model")
    return Running(build_server(model, tokenizer, port=0, **kwargs), log)


@pytest.fixture(scope="session")
def tiny_model():
    # untied head: a tied tiny model keeps repeating its last input token, which would make every comparison trivial
    return random_decoder(dataclasses.replace(TINY, tie_embeddings=False), seed=0, scale=1.0)


@pytest.fixture(scope="module")
def tiny_server(tiny_model, tokenizer):
    running = start_server(tiny_model, tokenizer, max_batch=16, batch_wait_ms=200, max_len=256,
                           default_max_tokens=8)
    yield running
    running.close()
