"""A scripted model behind Anthropic's Messages API, for running Claude Code itself.

Claude Code reaches its model at `ANTHROPIC_BASE_URL`. This server answers each
request of the main loop (the one that offers the `Bash` tool) with the next
scripted call (a `Bash` command, or a tool's name and input), and with a short
text once every call has its result; any other request (titles, summaries)
gets the text. Every request is kept, so a test
reads the tool results exactly as the model was shown them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: A scripted call: a `Bash` command, or (a tool's name, its input).
Call = str | tuple[str, dict[str, Any]]


@dataclass
class Script:
    commands: Sequence[Call]
    requests: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def results(self) -> list[dict[str, Any]]:
        """The tool results of the last request: what the model saw of each call, in order."""
        with self.lock:
            last = self.requests[-1] if self.requests else {}
        found = [block for message in last.get("messages", [])
                 if message.get("role") == "user" and isinstance(message.get("content"), list)
                 for block in message["content"] if block.get("type") == "tool_result"]
        return sorted(found, key=lambda b: int(b["tool_use_id"].rsplit("_", 1)[1]))

    def reply(self, body: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """The next content block (complete) and the stop reason."""
        with self.lock:
            self.requests.append(body)
        answered = sum(1 for message in body.get("messages", [])
                       if isinstance(message.get("content"), list)
                       for block in message["content"] if block.get("type") == "tool_result")
        offers_bash = any(tool.get("name") == "Bash" for tool in body.get("tools", []))
        if offers_bash and answered < len(self.commands):
            call = self.commands[answered]
            name, given = ("Bash", {"command": call, "description": "a call"}) \
                if isinstance(call, str) else call
            return ({"type": "tool_use", "id": f"toolu_{answered}", "name": name,
                     "input": given}, "tool_use")
        return {"type": "text", "text": "done"}, "end_turn"


def _events(block: dict[str, Any], stop: str, model: str) -> Iterator[tuple[str, Any]]:
    """The block streamed as the Messages API streams it."""
    yield "message_start", {"type": "message_start", "message": {
        "id": "msg_scripted", "type": "message", "role": "assistant", "model": model,
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1}}}
    if block["type"] == "tool_use":
        start = {**block, "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
    else:
        start = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": block["text"]}
    yield "content_block_start", {"type": "content_block_start", "index": 0,
                                  "content_block": start}
    yield "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
    yield "content_block_stop", {"type": "content_block_stop", "index": 0}
    yield "message_delta", {"type": "message_delta",
                            "delta": {"stop_reason": stop, "stop_sequence": None},
                            "usage": {"output_tokens": 1}}
    yield "message_stop", {"type": "message_stop"}


def _handler(script: Script) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(404)
            self.end_headers()

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
            block, stop = script.reply(body)
            model = str(body.get("model", "scripted"))
            if not body.get("stream"):
                data = json.dumps({"id": "msg_scripted", "type": "message", "role": "assistant",
                                   "model": model, "content": [block], "stop_reason": stop,
                                   "stop_sequence": None,
                                   "usage": {"input_tokens": 1, "output_tokens": 1}}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            for name, event in _events(block, stop, model):
                self.wfile.write(f"event: {name}\ndata: {json.dumps(event)}\n\n".encode())
            self.wfile.flush()

    return Handler


@contextmanager
def scripted_api(commands: Sequence[Call]) -> Iterator[tuple[str, Script]]:
    """(the base URL to give Claude Code, the script and the requests it received)."""
    script = Script(commands)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(script))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", script
    finally:
        server.shutdown()
        server.server_close()
