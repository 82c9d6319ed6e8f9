"""A complete agent loop: a model behind an OpenAI-compatible Chat
Completions endpoint answers a question by running Python in a cellvm
sandbox.

    OPENAI_API_KEY=... python3 openai_agent.py "What is the 30th Fibonacci number?"

Needs the cellvm daemon (CELLVM_SOCKET, else /run/cellvm/cellvm.sock) and
the cellvm package (pip install ./clients/python, or PYTHONPATH).
OPENAI_BASE_URL (e.g. http://localhost:8000/v1 for a local server) and
OPENAI_MODEL change the endpoint and the model.
"""

import json
import os
import sys
import urllib.request

from cellvm import Sandbox, tools

BASE = os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1").rstrip("/")
MODEL = os.environ.get("OPENAI_MODEL", "gpt-4.1")
MAX_TURNS = 20


def chat(body):
    """One call of Chat Completions."""
    headers = {"content-type": "application/json"}
    if os.environ.get("OPENAI_API_KEY"):
        headers["authorization"] = "Bearer " + os.environ["OPENAI_API_KEY"]
    req = urllib.request.Request(BASE + "/chat/completions", data=json.dumps(body).encode(), headers=headers)
    with urllib.request.urlopen(req, timeout=600) as resp:
        return json.load(resp)


def answer(question):
    # One sandbox per conversation: variables persist from one call to the next.
    with Sandbox.create(memory_mib=1024) as sbx:
        history = [{"role": "user", "content": question}]
        for _ in range(MAX_TURNS):
            msg = chat({"model": MODEL, "messages": history, "tools": [tools.openai_tool()]})["choices"][0]["message"]
            history.append(msg)
            calls = msg.get("tool_calls") or []
            if not calls:
                return msg.get("content") or ""
            # Tool messages answer every call by id; the figures follow in
            # one user message (a tool message carries only text).
            results = []
            for call in calls:
                fn = call["function"]
                if fn["name"] == tools.TOOL_NAME:
                    out = tools.run_tool_call(sbx, fn["arguments"])
                else:
                    out = tools.tool_error(f"there is no tool named {fn['name']!r}")
                print(f"[{fn['name']}] {out.text[:200]}", file=sys.stderr)
                results.append((call["id"], fn["name"], out))
            history.extend(tools.openai_tool_messages(results))
    raise SystemExit(f"no answer after {MAX_TURNS} turns")


if __name__ == "__main__":
    print(answer(" ".join(sys.argv[1:]) or "Make a small table of squares, chart it, and tell me the mean."))
