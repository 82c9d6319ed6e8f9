"""A complete agent loop: Claude (Anthropic's Messages API) answers a
question by running Python in a cellvm sandbox.

    ANTHROPIC_API_KEY=... python3 anthropic_agent.py "What is the 30th Fibonacci number?"

Needs the cellvm daemon (CELLVM_SOCKET, else /run/cellvm/cellvm.sock) and
the cellvm package (pip install ./clients/python, or PYTHONPATH).
ANTHROPIC_BASE_URL and ANTHROPIC_MODEL change the endpoint and the model.
"""

import json
import os
import sys
import urllib.request

from cellvm import Sandbox, tools

BASE = os.environ.get("ANTHROPIC_BASE_URL", "https://api.anthropic.com").rstrip("/")
MODEL = os.environ.get("ANTHROPIC_MODEL", "claude-sonnet-4-5")
MAX_TURNS = 20


def messages(body):
    """One call of the Messages API."""
    req = urllib.request.Request(BASE + "/v1/messages", data=json.dumps(body).encode(), headers={
        "content-type": "application/json",
        "x-api-key": os.environ.get("ANTHROPIC_API_KEY", ""),
        "anthropic-version": "2023-06-01",
    })
    with urllib.request.urlopen(req, timeout=600) as resp:
        return json.load(resp)


def answer(question):
    # One sandbox per conversation: variables persist from one call to the next.
    with Sandbox.create(memory_mib=1024) as sbx:
        history = [{"role": "user", "content": question}]
        for _ in range(MAX_TURNS):
            resp = messages({"model": MODEL, "max_tokens": 4096, "tools": [tools.anthropic_tool()], "messages": history})
            history.append({"role": "assistant", "content": resp["content"]})
            calls = [b for b in resp["content"] if b["type"] == "tool_use"]
            if not calls:
                return "".join(b["text"] for b in resp["content"] if b["type"] == "text")
            # Every call gets exactly one result, under its id; errors are
            # results the model reads and fixes.
            results = []
            for call in calls:
                if call["name"] == tools.TOOL_NAME:
                    out = tools.run_tool_call(sbx, call["input"])
                else:
                    out = tools.tool_error(f"there is no tool named {call['name']!r}")
                print(f"[{call['name']}] {out.text[:200]}", file=sys.stderr)
                results.append(tools.anthropic_tool_result(out, call["id"]))
            history.append({"role": "user", "content": results})
    raise SystemExit(f"no answer after {MAX_TURNS} turns")


if __name__ == "__main__":
    print(answer(" ".join(sys.argv[1:]) or "Make a small table of squares, chart it, and tell me the mean."))
