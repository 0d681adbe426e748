"""A tiny OpenAI-compatible server on 127.0.0.1 that misbehaves on request (test helper, not a test module).

The first path segment picks the behaviour: ``http://127.0.0.1:PORT/<behaviour>/v1``.

    ok         max_tokens tokens, finish_reason=length, usage, [DONE]
    http500    HTTP 500
    hang       accepts the request and never answers
    trickle    200 and an SSE keep-alive comment every 50 ms, never a token
    slow       1 token, then keep-alive comments forever (only a whole-request deadline ends it)
    early      3 tokens, then the connection closes (no finish_reason, no [DONE])
    malformed  one event that is not JSON
    empty      [DONE] and nothing else
    too_many   three times max_tokens tokens, finish_reason=length
    flaky      as ok, but every third request to it is cut as ``early`` is
    plain_vllm as ok; its /metrics is a vLLM page without speculative decoding (no spec-decode series)
    spec_vllm  as ok; its /metrics is a vLLM page with 4-token speculation whose counters move per request

Other behaviours have no /metrics (404). ``<behaviour>~<tag>`` behaves as ``<behaviour>`` under another
URL (two servers that behave alike, e.g. a "speculative" and a baseline URL of one plain server).

Every handler gives up after ``MAX_HOLD_S`` or when the server stops, so a test can never hang
on it; ``requests`` records each request's path, headers and body.
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_HOLD_S = 20.0
TOKEN = 65  # "A" in the byte-level tokenizer of random:tiny-target


class LoopbackServer:
    def __init__(self) -> None:
        self.stop_event = threading.Event()
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args) -> None:  # quiet
                pass

            def _behaviour(self) -> str:
                return self.path.strip("/").split("/", 1)[0].split("~", 1)[0]

            def do_GET(self) -> None:  # noqa: N802
                if self.path.endswith("/models"):
                    self._json(200, {"data": [{"id": "tiny"}]})
                elif self.path.endswith("/metrics") and self._behaviour() in ("plain_vllm", "spec_vllm"):
                    self._text(outer.metrics_page(self._behaviour()))
                else:
                    self._json(404, {"error": "not found"})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                outer.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                getattr(self, "_" + self._behaviour(), self._ok)(body)

            def _json(self, code: int, obj) -> None:
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _text(self, text: str) -> None:
                data = text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _flaky(self, body) -> None:
                if sum(1 for r in outer.requests if r["path"].startswith("/flaky")) % 3 == 0:
                    self._early(body)
                else:
                    self._ok(body)

            def _start_stream(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()

            def _event(self, obj) -> None:
                payload = obj if isinstance(obj, str) else json.dumps(obj)
                self.wfile.write(f"data: {payload}\n\n".encode())
                self.wfile.flush()

            def _tokens(self, n: int, finish: str | None) -> None:
                for i in range(n):
                    last = i == n - 1
                    self._event({"choices": [{"index": 0, "text": "A", "token_ids": [TOKEN],
                                              "finish_reason": finish if last else None}]})

            def _usage(self, n: int, body) -> None:
                self._event({"choices": [], "usage": {"prompt_tokens": len(body.get("prompt") or []),
                                                      "completion_tokens": n}})

            def _ok(self, body) -> None:
                n = int(body.get("max_tokens", 8))
                self._start_stream()
                self._tokens(n, "length")
                self._usage(n, body)
                self._event("[DONE]")

            def _too_many(self, body) -> None:
                n = 3 * int(body.get("max_tokens", 8))
                self._start_stream()
                self._tokens(n, "length")
                self._usage(n, body)
                self._event("[DONE]")

            def _http500(self, body) -> None:
                self._json(500, {"error": "internal server error"})

            def _hang(self, body) -> None:
                outer.stop_event.wait(MAX_HOLD_S)

            def _slow(self, body) -> None:
                self._start_stream()
                self._tokens(1, None)
                self._keep_alive()

            def _trickle(self, body) -> None:
                self._start_stream()
                self._keep_alive()

            def _keep_alive(self) -> None:
                t_end = time.monotonic() + MAX_HOLD_S
                while time.monotonic() < t_end and not outer.stop_event.is_set():
                    try:
                        self.wfile.write(b": keep-alive\n\n")
                        self.wfile.flush()
                    except OSError:
                        return
                    time.sleep(0.05)

            def _early(self, body) -> None:
                self._start_stream()
                self._tokens(3, None)
                self.close_connection = True

            def _malformed(self, body) -> None:
                self._start_stream()
                self._tokens(1, None)
                self.wfile.write(b'data: {"choices": [{"text": "A", \n\n')
                self.wfile.flush()

            def _empty(self, body) -> None:
                self._start_stream()
                self._event("[DONE]")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def metrics_page(self, behaviour: str) -> str:
        """A vLLM-style /metrics page; ``spec_vllm``: one 4-token draft per completion served so far there."""
        lines = ['vllm:num_requests_running{model_name="tiny"} 0.0']
        if behaviour == "spec_vllm":
            n = sum(1 for r in self.requests if r["path"].startswith("/spec_vllm/"))
            lines += [f'vllm:spec_decode_num_drafts_total{{model_name="tiny"}} {n}.0',
                      f'vllm:spec_decode_num_draft_tokens_total{{model_name="tiny"}} {4 * n}.0',
                      f'vllm:spec_decode_num_accepted_tokens_total{{model_name="tiny"}} {2 * n}.0']
            lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{model_name="tiny",position="{i}"}} '
                      f'{n if i < 2 else 0}.0' for i in range(4)]
        return "\n".join(lines) + "\n"

    def url(self, behaviour: str, userinfo: str = "") -> str:
        return f"http://{userinfo + '@' if userinfo else ''}127.0.0.1:{self.port}/{behaviour}/v1"

    def __enter__(self) -> "LoopbackServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop_event.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)
