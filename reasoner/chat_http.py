"""One OpenAI-compatible `POST {base_url}/chat/completions` client with retries, shared by the teacher policy
(`agents.policies.OpenAIChatPolicy`) and the endpoint judge (`judges.judge.EndpointJudge`). urllib only, so a
training run needs no HTTP package.

What is retried: infrastructure failures, meaning connection errors, timeouts, a reply cut short or garbled on the
wire (`http.client.HTTPException`: a server that died mid-body raises `IncompleteRead`, which is no `OSError`), HTTP
408/409/429/5xx, and a body that is not a chat completion or that the caller's `parse` refuses. The wait before retry
`a` (0-based) is `min(30, backoff_s * 2**a)` seconds. What is not retried: any other HTTP status (400, 401, 404: a
wrong request, key or model), which would fail the same way again. Either way a request that still fails comes back
as `(None, error)` with the error text, never as an exception: one bad reply must not end a run.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Callable, TypeVar

T = TypeVar("T")

RETRY_STATUS = (408, 409, 429, 500, 502, 503, 504)
MAX_BACKOFF_S = 30.0


class ChatEndpoint:
    """`complete(body, parse)`: `parse(completion)` of the decoded completion, or `(None, error)`.

    `failures` counts requests given up on and `last_error` holds the newest reason (both thread-safe: callers
    send a batch concurrently). A host on this machine (tests, `reasoner serve`) bypasses any HTTP proxy.
    """

    def __init__(self, base_url: str, *, api_key: str | None = None, timeout_s: float = 60.0, retries: int = 2,
                 backoff_s: float = 1.0, sleep: Callable[[float], None] = time.sleep):
        if timeout_s <= 0 or retries < 0 or backoff_s < 0:
            raise ValueError(f"timeout_s={timeout_s}, retries={retries}, backoff_s={backoff_s}: expected "
                             "timeout_s > 0, retries >= 0, backoff_s >= 0")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.api_key, self.timeout_s, self.retries, self.backoff_s = api_key, timeout_s, retries, backoff_s
        self._sleep = sleep
        self.failures = 0
        self.last_error = ""
        self._lock = threading.Lock()
        local = urllib.parse.urlsplit(self.url).hostname in ("127.0.0.1", "localhost", "::1")
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({} if local else None))

    def complete(self, body: dict, parse: Callable[[dict], T], *,
                 cancel: threading.Event | None = None) -> tuple[T | None, str]:
        """`(parse(completion), "")`, or `(None, error)` once retries are spent or the failure is not retryable.

        `completion` is the decoded JSON body, checked to hold an object at `choices[0].message`; `parse` raises
        `ValueError` for one it cannot use, which counts as a retryable bad body. Once `cancel` is set (the caller's
        result is no longer wanted, e.g. a reward call past its deadline) a failed attempt is not retried: the
        error says so. The attempt in flight is never cut short.
        """
        error = ""
        cancelled = (lambda: False) if cancel is None else cancel.is_set
        for attempt in range(self.retries + 1):
            if attempt and not cancelled():  # the backoff before retry `attempt`, skipped once cancelled
                self._sleep(min(MAX_BACKOFF_S, self.backoff_s * 2 ** (attempt - 1)))
            if attempt and cancelled():
                error += f" (not retried: cancelled after {attempt} attempt{'s' if attempt > 1 else ''})"
                break
            try:
                return parse(self._completion(body)), ""
            except _Retryable as err:
                error = str(err)
            except ValueError as err:
                error = f"{self.url}: {err}"
            except _Fatal as err:
                error = str(err)
                break
        with self._lock:
            self.failures += 1
            self.last_error = error
        return None, error

    def _completion(self, body: dict) -> dict:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers, method="POST")
        try:
            with self._opener.open(request, timeout=self.timeout_s) as response:
                payload = response.read()
        except urllib.error.HTTPError as err:
            kind = _Retryable if err.code in RETRY_STATUS else _Fatal
            raise kind(f"{self.url} answered HTTP {err.code}: {err.read()[:500]!r}") from None
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError, http.client.HTTPException) as err:
            raise _Retryable(f"{self.url}: {type(err).__name__}: {err}") from None
        try:
            completion = json.loads(payload)
            message = completion["choices"][0]["message"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise _Retryable(f"{self.url}: the body is not a chat completion ({payload[:200]!r})") from None
        if not isinstance(message, dict):
            raise _Retryable(f"{self.url}: choices[0].message is {type(message).__name__}, expected an object")
        return completion


class _Retryable(Exception):
    pass


class _Fatal(Exception):
    pass
