"""`reasoner serve`: an OpenAI-compatible HTTP server over the jitted sampler.

    server = build_server(model, tokenizer, model_name="smollm2", port=8000)   # or Server(ChatService(...))
    threading.Thread(target=server.serve_forever).start()
    OpenAI(base_url=server.url, api_key="-").chat.completions.create(model="smollm2", messages=[...])

Modules, bottom up: `protocol` (request validation, error bodies), `render` (chat template with tools and a
client's `chat_template_kwargs`, reply -> tool calls), `backend` (the one interface to a generator:
`Backend.generate(requests)`; `SamplerBackend` over `reasoner.sampling.Sampler`), `batcher` (requests arriving
together -> shared batches, one log line each), `service` (chat.completion and chunk bodies), `completions`
(`/v1/completions`, the legacy text API, over the same service), `http` (the threading HTTP server, SSE, graceful
shutdown), `engine_loop` (batcher and backend at once over the continuous-batching `RolloutEngine`: requests join
the running rows between two decode chunks), `model_source` (what `--model` may name).
"""

from __future__ import annotations

from reasoner.serve.backend import Backend, GenRequest, SamplerBackend
from reasoner.serve.batcher import Batcher
from reasoner.serve.http import Server
from reasoner.serve.service import ChatService

__all__ = ["Backend", "Batcher", "ChatService", "GenRequest", "SamplerBackend", "Server", "build_server"]


def build_server(model, tokenizer, *, model_name: str, host: str = "127.0.0.1", port: int = 8000,
                 max_batch: int = 16, batch_wait_ms: float = 20.0, max_len: int = 2048, default_max_tokens: int = 512,
                 max_body_bytes: int = 4 << 20, backend: Backend | None = None, engine: str = "static",
                 speculate: int = 0) -> Server:
    """A ready (not yet serving) `Server` over `model` (an NNX Decoder) or a given `backend`.

    max_batch: rows (samples, counting n) decoded together; batch_wait_ms: how long a batch collects requests;
    max_len: cache slots per row (prompt + max_tokens must fit); port 0 picks a free port (see `server.url`);
    engine: "static" (`reasoner.sampling.Sampler`) or "paged" (the continuous-batching `RolloutEngine`);
    speculate: the paged engine's prompt-lookup draft tokens per step (`reasoner.sampling.speculative`; 0 = off)."""
    if speculate and engine != "paged":
        raise ValueError(f"speculate={speculate}: speculative decoding runs on engine='paged', not {engine!r}")
    if backend is None and engine == "paged":
        from reasoner.serve.engine_loop import EngineLoop, server_engine

        loop = EngineLoop(lambda: server_engine(model, tokenizer, slots=max_batch, max_len=max_len,
                                                speculate=speculate), max_len=max_len)
        backend, batcher = loop, loop
    elif engine not in ("static", "paged"):
        raise ValueError(f"engine={engine!r}: expected 'static' or 'paged'")
    else:
        if backend is None:
            from reasoner.sampling import Sampler

            backend = SamplerBackend(Sampler(model, tokenizer), max_len=max_len)
        batcher = Batcher(backend, max_rows=max_batch, wait_s=batch_wait_ms / 1000.0)
    service = ChatService(backend, tokenizer, batcher, model_name=model_name, default_max_tokens=default_max_tokens)
    try:
        return Server(service, host=host, port=port, max_body_bytes=max_body_bytes)
    except OSError:
        batcher.close()
        raise
