#!/usr/bin/env python3
"""A scripted model endpoint on 127.0.0.1 for the real agent clients.

It speaks the three wire protocols the clients use to reach their model, as each
provider documents them:

* Anthropic Messages (`POST /v1/messages`, streamed as server-sent events), which Claude
  Code calls at `ANTHROPIC_BASE_URL`;
* OpenAI Responses (`POST /v1/responses`, streamed), which Codex calls at a
  `model_providers.NAME.base_url` with `wire_api = "responses"`;
* Gemini `generateContent` / `streamGenerateContent` (`POST /v1beta/models/M:…`), which
  Gemini CLI calls at `GOOGLE_GEMINI_BASE_URL`.

No model decides anything. A session's prompt names a script (`fleet-script:NAME`); the
script is a list of tool calls (`server`, `tool`, `args`). The endpoint answers turn k of
a conversation (k = the tool results it already holds) with call k, found by name among
the tools the client offered, and once the calls are spent with a text that ends the
turn. An argument written `"$prev.FIELD"` takes FIELD from the previous call's result.
Every tool result the client sends back is appended to the log as one JSON line, so a
test reads exactly what the agent read. A script's `hold_until` file makes its last
answer wait until the file exists: the session, and its servers, stay up meanwhile.
Requests without a script marker or without tools (titles, a router's classification,
checks a client makes on the side) get a short text answer.

    scripted-model.py --scripts S.json --log L.jsonl --port-file P
"""
import argparse
import http.server
import json
import os
import re
import threading
import time

MARKER = re.compile(r"fleet-script:([A-Za-z0-9_-]+)")
SIDE_ANSWER = '{"next_speaker": "user", "reasoning": "the scripted turn is over"}'


def strings(value):
    """Every string inside a JSON value, depth first."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


def find_all(value, name):
    """Every value of `name` in a JSON value, depth first, looking into strings that
    hold JSON (after a preamble, or several: Gemini CLI wraps a refusal in a sentence)."""
    if isinstance(value, dict):
        if name in value:
            yield value[name]
        for v in value.values():
            yield from find_all(v, name)
    elif isinstance(value, list):
        for v in value:
            yield from find_all(v, name)
    elif isinstance(value, str):
        decoder, at = json.JSONDecoder(), value.find("{")
        while at != -1:
            try:
                parsed, end = decoder.raw_decode(value, at)
            except ValueError:
                at = value.find("{", at + 1)
                continue
            yield from find_all(parsed, name)
            at = value.find("{", end)


def find_field(value, name):
    """The first value of `name` in a JSON value (see `find_all`), or None."""
    return next(find_all(value, name), None)


class Conversation:
    """What one request holds, whatever its protocol: the script it runs and the tool
    results already sent back, in order."""

    def __init__(self, script, results, tools):
        self.script = script
        self.results = results
        self.tools = tools


def anthropic(body):
    texts, results = [], []
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, str):
            texts.append(content)
            continue
        for block in content or []:
            if block.get("type") == "text" and message.get("role") == "user":
                texts.append(block.get("text", ""))
            elif block.get("type") == "tool_result":
                results.append(block.get("content"))
    return texts, results, [(None, t.get("name", "")) for t in body.get("tools", [])]


def responses(body):
    texts, results = [], []
    items = body.get("input", [])
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    for item in items:
        if item.get("type") == "function_call_output":
            results.append(item.get("output"))
        elif item.get("role") == "user":
            texts.extend(strings(item.get("content")))
    tools = []
    for t in body.get("tools", []):
        # Codex offers each MCP server's tools grouped in a `namespace` tool.
        if t.get("type") == "namespace":
            tools.extend((t.get("name"), inner.get("name", "")) for inner in t.get("tools", []))
        else:
            tools.append((None, t.get("name", "")))
    return texts, results, tools


def gemini(body):
    texts, results = [], []
    for content in body.get("contents", []):
        for part in content.get("parts", []):
            if "functionResponse" in part:
                results.append(part["functionResponse"])
            elif "text" in part and content.get("role") == "user":
                texts.append(part["text"])
    tools = [
        (None, d.get("name", ""))
        for t in body.get("tools", [])
        for d in t.get("functionDeclarations", [])
    ]
    return texts, results, tools


class Endpoint:
    def __init__(self, scripts, log):
        self.scripts = scripts
        self.log = log
        self.logged = set()
        self.lock = threading.Lock()

    def read(self, texts, results, tools):
        names = [m.group(1) for t in texts for m in MARKER.finditer(t)]
        script = names[0] if names and names[0] in self.scripts else None
        return Conversation(script, results, tools)

    def record(self, conv):
        """Log each result of the conversation once (a client resends the history)."""
        steps = self.scripts[conv.script]["calls"]
        with self.lock, open(self.log, "a") as log:
            for i, result in enumerate(conv.results):
                if (conv.script, i) in self.logged or i >= len(steps):
                    continue
                self.logged.add((conv.script, i))
                log.write(json.dumps({"script": conv.script, "step": i,
                                      "tool": steps[i]["tool"], "result": result}) + "\n")

    def next_turn(self, conv):
        """('call', tool name, args) or ('text', answer)."""
        if conv.script is None or not conv.tools:
            # A side request (a title, a router's classification) offers no tools.
            return ("text", SIDE_ANSWER)
        self.record(conv)
        script = self.scripts[conv.script]
        calls = script["calls"]
        k = len(conv.results)
        if k < len(calls):
            step = calls[k]
            name = self.tool_name(conv.tools, step["server"], step["tool"])
            prev = conv.results[-1] if conv.results else None
            args = {key: self.resolve(v, prev) for key, v in step.get("args", {}).items()}
            return ("call", name, args)
        hold = script.get("hold_until")
        deadline = time.monotonic() + 120
        while hold and not os.path.exists(hold) and time.monotonic() < deadline:
            time.sleep(0.1)
        return ("text", f"fleet-script {conv.script}: done")

    @staticmethod
    def tool_name(offered, server, tool):
        """The client's name for a server's tool, as (namespace, name): each client
        qualifies it its own way (`mcp__gitea-reconciler__TOOL`, a namespace
        `mcp__gitea_reconciler` holding `TOOL`, …)."""
        server_key = re.sub(r"[^a-z0-9]", "", server.lower())
        for namespace, name in offered:
            qualified = re.sub(r"[^a-z0-9]", "", f"{namespace or ''}{name}".lower())
            if name.endswith(tool) and server_key in qualified:
                return (namespace, name)
        raise LookupError(f"no tool {tool} of {server} among {offered}")

    @staticmethod
    def resolve(value, prev):
        if isinstance(value, str) and value.startswith("$prev."):
            return find_field(prev, value[len("$prev."):])
        return value


def sse(events):
    return "".join(
        (f"event: {name}\n" if name else "") + f"data: {json.dumps(data)}\n\n"
        for name, data in events
    ).encode()


def anthropic_answer(turn, model, stream):
    if turn[0] == "call":
        block = {"type": "tool_use", "id": f"toolu_{time.monotonic_ns()}", "name": turn[1][1], "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(turn[2])}
        stop = "tool_use"
        whole = dict(block, input=turn[2])
    else:
        block = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": turn[1]}
        stop = "end_turn"
        whole = {"type": "text", "text": turn[1]}
    usage = {"input_tokens": 1, "output_tokens": 1}
    message = {"id": f"msg_{time.monotonic_ns()}", "type": "message", "role": "assistant",
               "model": model, "stop_sequence": None, "usage": usage}
    if not stream:
        return "application/json", json.dumps(dict(message, content=[whole], stop_reason=stop)).encode()
    return "text/event-stream", sse([
        ("message_start", {"type": "message_start", "message": dict(message, content=[], stop_reason=None)}),
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                           "usage": {"output_tokens": 1}}),
        ("message_stop", {"type": "message_stop"}),
    ])


def responses_answer(turn):
    rid = f"resp_{time.monotonic_ns()}"
    if turn[0] == "call":
        namespace, name = turn[1]
        item = {"type": "function_call", "id": f"fc_{rid}", "call_id": f"call_{rid}",
                "name": name, "arguments": json.dumps(turn[2])}
        if namespace:
            item["namespace"] = namespace
    else:
        item = {"type": "message", "role": "assistant", "id": f"msg_{rid}",
                "content": [{"type": "output_text", "text": turn[1]}]}
    usage = {"input_tokens": 1, "input_tokens_details": None, "output_tokens": 1,
             "output_tokens_details": None, "total_tokens": 2}
    return "text/event-stream", sse([
        ("response.created", {"type": "response.created", "response": {"id": rid}}),
        ("response.output_item.done", {"type": "response.output_item.done", "item": item}),
        ("response.completed", {"type": "response.completed", "response": {"id": rid, "usage": usage}}),
    ])


def gemini_answer(turn, stream):
    if turn[0] == "call":
        part = {"functionCall": {"name": turn[1][1], "args": turn[2]}}
    else:
        part = {"text": turn[1]}
    chunk = {"candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
             "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 1, "totalTokenCount": 2}}
    if stream:
        return "text/event-stream", sse([(None, chunk)])
    return "application/json", json.dumps(chunk).encode()


def handler(endpoint):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_):
            pass

        def send(self, status, kind, payload):
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self):
            # Model listings some clients fetch before a session.
            self.send(200, "application/json", b'{"object": "list", "data": [], "models": []}')

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b"{}"
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {}
            path = self.path.split("?")[0]
            try:
                if path.endswith("/count_tokens"):
                    return self.send(200, "application/json", b'{"input_tokens": 1}')
                if path.endswith(":countTokens"):
                    return self.send(200, "application/json", b'{"totalTokens": 1}')
                if path.endswith("/messages"):
                    turn = endpoint.next_turn(endpoint.read(*anthropic(body)))
                    return self.send(200, *anthropic_answer(turn, body.get("model", "scripted"), body.get("stream")))
                if path.endswith("/responses"):
                    turn = endpoint.next_turn(endpoint.read(*responses(body)))
                    return self.send(200, *responses_answer(turn))
                if ":streamGenerateContent" in path or ":generateContent" in path:
                    turn = endpoint.next_turn(endpoint.read(*gemini(body)))
                    return self.send(200, *gemini_answer(turn, ":stream" in path))
            except LookupError as e:
                return self.send(400, "application/json", json.dumps({"error": {"message": str(e)}}).encode())
            self.send(404, "application/json", b'{"error": {"message": "not scripted"}}')

    return Handler


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scripts", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--port-file", required=True)
    args = parser.parse_args()
    with open(args.scripts) as f:
        scripts = json.load(f)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler(Endpoint(scripts, args.log)))
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(args.port_file + ".tmp", args.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
