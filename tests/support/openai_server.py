"""A scripted OpenAI-compatible server on 127.0.0.1, for testing the model path over real HTTP.

``ScriptedServer`` answers ``POST /v1/chat/completions`` the way a llama.cpp, vLLM or Ollama
server would, from a thread of its own (stdlib ``http.server``), so LiteLLM and instructor run
exactly as they do for a user. It also speaks the two other wire formats the README's recipes
reach: Anthropic's ``POST /v1/messages`` and Ollama's own ``POST /api/chat`` and ``/api/generate``.
What it answers is scripted per request:

* ``"valid"`` (the default): an answer built from the request's own JSON schema (the
  ``response_format`` schema, the forced tool's parameters, or the schema instructor's JSON mode
  writes into the system message), with the keys, message ids and session ids the prompt shows,
  so every role's pydantic model (and its validators) accepts it;
* ``"invalid"``: JSON that misses the schema's fields (what a small model did with the gate);
* ``"garbage"``: text that is not JSON at all;
* ``"slow"``: nothing until ``slow_seconds`` pass (or the server stops);
* ``"401"``, ``"404"``, ``"500"``, ``"429"`` (with a ``Retry-After`` header): those statuses;
* ``"400"``: a server that takes no JSON schema refusing ``response_format``.

``script(...)`` queues behaviours for the next requests; once the queue is empty ``default``
answers. A model named in ``unknown_models`` gets a 404, as a server does for a model it does
not serve. ``delay`` adds latency to every answer (the benchmark's 200 ms). Every request is
recorded (``requests``) with its headers and JSON body. ``closed_port_url()`` is a URL where
nothing listens.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

BEHAVIOURS = ("valid", "invalid", "garbage", "slow", "400", "401", "404", "429", "500")

# What the prompts show: a batch key at a line's start ("[c01] ...", "Note [n01]", "Pair [p01]"),
# a message of the extract prompt ("[m-1] (user) ..."), a session of the thread map ("- id s1 (...").
_KEY = re.compile(r"(?m)^(?:Note |Pair )?\[([^\]\s]+)\]")
_MESSAGE = re.compile(r"(?m)^\[([^\]\s]+)\] \((user|assistant)\)")
_SESSION = re.compile(r"(?m)^- id (\S+) \(")
_SUMMARY_WORDS = 210  # a session summary takes 200 to 400 words
# Preferred values of the enums the roles' schemas hold: a fact (any speaker may state one), keep,
# a good note, related pairs (a collapse or a supersession would archive notes).
_PREFERRED = ("fact", "keep", "good", "related", "concept")


@dataclass(frozen=True)
class Recorded:
    """One request as the server got it."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def model(self) -> str:
        """The model the request named."""
        return str(self.body.get("model", ""))

    def text(self) -> str:
        """Every message's text (and a system or prompt field), joined: what the model was shown."""
        parts = [self.body.get("system"), self.body.get("prompt")]
        parts += [m.get("content") for m in self.body.get("messages", [])]
        return "\n".join(_text_of(part) for part in parts if part)

    def user_text(self) -> str:
        """What the user part of the prompt says (an Ollama generate prompt is one text)."""
        users = [_text_of(m.get("content")) for m in self.body.get("messages", []) if m.get("role") == "user"]
        return "\n".join(users) or str(self.body.get("prompt") or "")


def _text_of(content: Any) -> str:
    """A message's text: a string, or the text blocks of a list (Anthropic's form)."""
    if isinstance(content, list):
        return "\n".join(str(block.get("text") or "") for block in content if isinstance(block, dict))
    return str(content or "")


@dataclass
class ScriptedServer:
    """An OpenAI-compatible chat completions server on 127.0.0.1, answering as scripted."""

    default: str = "valid"
    delay: float = 0.0  # seconds added to every answer
    slow_seconds: float = 60.0  # how long a "slow" answer takes (the server's stop ends it sooner)
    retry_after: float = 1.0  # the Retry-After header of a 429
    unknown_models: frozenset[str] = frozenset()
    responder: Callable[[Recorded, dict[str, Any]], Any] | None = None  # (request, built answer) -> answer
    requests: list[Recorded] = field(default_factory=list)
    peak: int = 0  # the most requests it was answering at once
    _in_flight: int = 0
    _queue: deque[str] = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopping: threading.Event = field(default_factory=threading.Event)
    _httpd: ThreadingHTTPServer | None = None

    # ------------------------------------------------------------------ life cycle

    def start(self) -> ScriptedServer:
        """Bind a free port on 127.0.0.1 and serve from a daemon thread."""
        server = self

        class Handler(_Handler):
            scripted = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="scripted-openai", daemon=True
        ).start()
        return self

    def stop(self) -> None:
        """Stop serving; a "slow" answer still waiting returns at once."""
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    @property
    def port(self) -> int:
        """The port it listens on."""
        assert self._httpd is not None, "start() the server first"
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """The ``api_base`` to give LiteLLM: ``http://127.0.0.1:<port>/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    # ------------------------------------------------------------------ scripting

    def script(self, *behaviours: str) -> ScriptedServer:
        """Answer the next requests with these behaviours, in order, then with ``default``."""
        unknown = [b for b in behaviours if b not in BEHAVIOURS]
        if unknown:
            raise ValueError(f"unknown behaviours {unknown}; use {BEHAVIOURS}")
        with self._lock:
            self._queue.extend(behaviours)
        return self

    def next_behaviour(self, model: str) -> str:
        """What to do with the request now arriving (and record nothing: ``record`` does)."""
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        return "404" if _bare_model(model) in self.unknown_models else self.default

    def record(self, request: Recorded) -> None:
        """Keep a request for the test to read."""
        with self._lock:
            self.requests.append(request)

    def busy(self, change: int) -> None:
        """Count a request starting (+1) or finished (-1), keeping the peak."""
        with self._lock:
            self._in_flight += change
            self.peak = max(self.peak, self._in_flight)

    def bodies(self) -> list[dict[str, Any]]:
        """The JSON bodies received so far."""
        with self._lock:
            return [r.body for r in self.requests]

    def wait(self, seconds: float) -> None:
        """Sleep, but return as soon as the server stops."""
        self._stopping.wait(seconds)


def closed_port_url() -> str:
    """An ``api_base`` on 127.0.0.1 where nothing listens (a port bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def _bare_model(model: str) -> str:
    return model.split("/", 1)[1] if "/" in model else model


# --------------------------------------------------------------------------- HTTP


class _Handler(BaseHTTPRequestHandler):
    scripted: ScriptedServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: a test's output is not the place for access lines

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self._json(200, {"object": "list", "data": []})
        else:
            self._json(404, _error("not found", "not_found"))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            self._json(400, _error("the body is not JSON", "invalid_request_error"))
            return
        request = Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        self.scripted.record(request)
        route = self.path.split("?", 1)[0].rstrip("/")
        shape = next((shape for suffix, shape in _ROUTES.items() if route.endswith(suffix)), None)
        if shape is None:
            self._json(404, _error(f"no route {self.path}", "not_found"))
            return
        self.scripted.busy(+1)
        try:
            self._answer(request, self.scripted.next_behaviour(request.model), shape)
        finally:
            self.scripted.busy(-1)

    def _answer(self, request: Recorded, behaviour: str, shape: Callable[[Recorded, Any], dict[str, Any]]) -> None:
        server = self.scripted
        if server.delay:
            server.wait(server.delay)
        if behaviour == "slow":
            server.wait(server.slow_seconds)
        if behaviour in ("400", "401", "404", "429", "500"):
            self._status(int(behaviour), request)
            return
        content: Any
        if behaviour == "invalid":
            content = {"c01": "keep", "note": "the answer leaves out every field the schema asks for"}
        elif behaviour == "garbage":
            content = "Sure! Here is what I think about these notes."
        else:
            content = valid_answer(request)
            if server.responder is not None:
                content = server.responder(request, content)
        self._json(200, shape(request, content))

    def _status(self, status: int, request: Recorded) -> None:
        if status == 400:
            self._json(400, _error("response_format of type json_schema is not supported", "invalid_request_error"))
        elif status == 401:
            self._json(401, _error("Incorrect API key provided.", "invalid_api_key"))
        elif status == 404:
            self._json(404, _error(f"The model `{_bare_model(request.model)}` does not exist.", "model_not_found"))
        elif status == 429:
            headers = {"Retry-After": f"{self.scripted.retry_after:g}"}
            self._json(429, _error("Rate limit reached; try again later.", "rate_limit_exceeded"), headers)
        else:
            self._json(500, _error("The server had an error while processing your request.", "server_error"))

    def _json(self, status: int, data: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        payload = json.dumps(data).encode("utf-8")
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up waiting (a deadline): nothing to answer


def _error(message: str, code: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}


def completion(request: Recorded, content: Any) -> dict[str, Any]:
    """A chat completion carrying ``content``: as a call of the forced tool when the request forced
    one, else as the message's text (JSON text for anything but a string)."""
    text = content if isinstance(content, str) else json.dumps(content)
    message: dict[str, Any] = {"role": "assistant", "content": text}
    finish = "stop"
    tool = _forced_tool(request.body)
    if tool is not None:
        call = {"id": "call_1", "type": "function", "function": {"name": tool, "arguments": text}}
        message, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
    prompt_tokens = max(1, len(request.text()) // 4)
    completion_tokens = max(1, len(text) // 4)
    return {
        "id": f"chatcmpl-{len(request.text())}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def anthropic_message(request: Recorded, content: Any) -> dict[str, Any]:
    """An Anthropic Messages answer: a ``tool_use`` block for a forced tool, else a text block."""
    text = content if isinstance(content, str) else json.dumps(content)
    tools = request.body.get("tools") or []
    if tools and not isinstance(content, str):
        block: dict[str, Any] = {"type": "tool_use", "id": "toolu_1", "name": tools[0]["name"], "input": content}
        stop = "tool_use"
    else:
        block, stop = {"type": "text", "text": text}, "end_turn"
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": request.model,
        "content": [block],
        "stop_reason": stop,
        "usage": {"input_tokens": max(1, len(request.text()) // 4), "output_tokens": max(1, len(text) // 4)},
    }


def ollama_chat(request: Recorded, content: Any) -> dict[str, Any]:
    """An answer of Ollama's own ``/api/chat``."""
    text = content if isinstance(content, str) else json.dumps(content)
    return {**_ollama(request, text), "message": {"role": "assistant", "content": text}}


def ollama_generate(request: Recorded, content: Any) -> dict[str, Any]:
    """An answer of Ollama's own ``/api/generate``."""
    text = content if isinstance(content, str) else json.dumps(content)
    return {**_ollama(request, text), "response": text}


def _ollama(request: Recorded, text: str) -> dict[str, Any]:
    return {
        "model": request.model,
        "created_at": "2024-01-01T00:00:00Z",
        "done": True,
        "done_reason": "stop",
        "prompt_eval_count": max(1, len(request.text()) // 4),
        "eval_count": max(1, len(text) // 4),
    }


_ROUTES: dict[str, Callable[[Recorded, Any], dict[str, Any]]] = {
    "/chat/completions": completion,
    "/v1/messages": anthropic_message,
    "/api/chat": ollama_chat,
    "/api/generate": ollama_generate,
}


def _forced_tool(body: dict[str, Any]) -> str | None:
    tools = body.get("tools") or []
    if not tools:
        return None
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        return str(choice.get("function", {}).get("name") or tools[0]["function"]["name"])
    return str(tools[0]["function"]["name"])


# --------------------------------------------------------------------------- answers from schemas


def request_schema(body: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON schema a request asks its answer to follow: ``response_format``'s, the forced
    tool's parameters, or the one instructor's JSON mode writes into the system message."""
    response_format = body.get("response_format") or {}
    if response_format.get("type") == "json_schema":
        return dict(response_format["json_schema"]["schema"])
    if (body.get("output_format") or {}).get("type") == "json_schema":  # Anthropic's structured output
        return dict(body["output_format"]["schema"])
    if isinstance(body.get("format"), dict):  # Ollama's own API
        return dict(body["format"])
    tools = body.get("tools") or []
    if tools:
        tool = tools[0]
        return dict(tool["function"]["parameters"] if "function" in tool else tool["input_schema"])
    for message in body.get("messages", []):
        text = _text_of(message.get("content"))
        at = text.find("json_schema")
        start = text.find("{", at) if at >= 0 else -1
        if start >= 0:
            try:
                schema, _ = json.JSONDecoder().raw_decode(text[start:])
                return dict(schema)
            except json.JSONDecodeError:
                continue
    return None


def valid_answer(request: Recorded) -> Any:
    """An answer that follows the request's schema and the ids its prompt shows."""
    schema = request_schema(request.body)
    if schema is None:
        return {}
    return answer_for(schema, request.user_text())


def answer_for(schema: dict[str, Any], prompt: str) -> Any:
    """A value following ``schema``, with the keys, message ids and session ids ``prompt`` shows."""
    return _Builder(schema, prompt).value(schema, "")


class _Builder:
    """Builds a value for a JSON schema, filling what validators check from the prompt's text."""

    def __init__(self, root: dict[str, Any], prompt: str):
        self.defs = {**root.get("$defs", {}), **root.get("definitions", {})}
        self.keys = list(dict.fromkeys(_KEY.findall(prompt)))
        self.messages = list(dict.fromkeys(_MESSAGE.findall(prompt)))
        self.sessions = list(dict.fromkeys(_SESSION.findall(prompt)))

    def resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        ref = schema.get("$ref")
        if ref:
            return self.resolve(self.defs[ref.rsplit("/", 1)[-1]])
        for union in ("anyOf", "oneOf"):
            if union in schema:
                options = [self.resolve(s) for s in schema[union]]
                return next((o for o in options if o.get("type") != "null"), options[0])
        if "allOf" in schema and len(schema["allOf"]) == 1:
            return self.resolve(schema["allOf"][0])
        return schema

    def value(self, schema: dict[str, Any], name: str, index: int = 0) -> Any:
        schema = self.resolve(schema)
        kind = schema.get("type")
        if "enum" in schema:
            return self.choice(list(schema["enum"]), name, index)
        if kind == "object" or "properties" in schema:
            return {prop: self.value(sub, prop, index) for prop, sub in schema.get("properties", {}).items()}
        if kind == "array":
            return self.items(schema, name)
        if kind == "string":
            return self.text(name, index)
        if kind == "integer":
            return int(schema.get("minimum", 0))
        if kind == "number":
            return float(schema.get("minimum", 0))
        if kind == "boolean":
            return False
        return None

    def items(self, schema: dict[str, Any], name: str) -> list[Any]:
        item = self.resolve(schema.get("items", {}))
        properties = item.get("properties", {})
        if "key" in properties and self.keys:
            return [{**self.value(item, name, i), "key": key} for i, key in enumerate(self.keys)]
        if name == "source_ids":
            return [self.messages[0][0]] if self.messages else ["1"]
        if "source_ids" in properties and self.messages:
            return [self.unit(item, i, message) for i, message in enumerate(self.messages[:3])]
        if "session_id" in properties and self.sessions:
            return [{**self.value(item, name, i), "session_id": s} for i, s in enumerate(self.sessions)]
        count = max(1, int(schema.get("minItems", 1)))
        return [self.value(item, name, i) for i in range(count)]

    def unit(self, item: dict[str, Any], index: int, message: tuple[str, str]) -> dict[str, Any]:
        unit = self.value(item, "unit", index)
        message_id, role = message
        return {**unit, "source_ids": [message_id], "speaker": role, "context": None}

    def choice(self, options: list[Any], name: str, index: int) -> Any:
        if name == "speaker" and self.messages:
            return self.messages[0][1]
        if name == "kind":
            return options[index % len(options)]
        return next((o for o in _PREFERRED if o in options), options[0])

    def text(self, name: str, index: int) -> str:
        if name == "summary":
            sentence = "The session went through the questions asked and what was settled. "
            return (sentence * (_SUMMARY_WORDS // 11 + 1)).strip()
        if name == "session_id":
            return self.sessions[0] if self.sessions else "1"
        if name in ("text", "unit"):
            return f"Point {index + 1} of this part is worth remembering."
        if name == "step":
            return "The work moved one step forward in this session."
        if name == "attribute":
            return ""
        return {
            "reasoning": "It shares the subject of the intent.",
            "reason": "shares the subject",
            "intent": "the subject of the prompt",
            "title": "A line of work",
        }.get(name, f"a short answer {index + 1}")
