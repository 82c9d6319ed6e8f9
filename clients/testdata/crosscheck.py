"""Reads {"cells": [{"id", "result"}], "facts": [{"network", "timeout_s"}]}
on stdin and prints what the Python client makes of them: each cell's
formatted tool output (text, images, is_error, and the Anthropic and OpenAI
content), and each description. The Go test compares it with package agent."""

import base64
import json
import sys

from cellvm import tools

doc = json.load(sys.stdin)
cells = []
for c in doc["cells"]:
    out = tools.format_execution(c["result"])
    cells.append({
        "text": out.text,
        "images": [[m, base64.b64encode(d).decode()] for m, d in out.images],
        "is_error": out.is_error,
        "anthropic": tools.anthropic_tool_result(out, c["id"]),
        "openai": tools.openai_tool_messages([(c["id"], "run_python", out)]),
    })
descriptions = [tools.description(f["network"], f["timeout_s"]) for f in doc["facts"]]
json.dump({"cells": cells, "descriptions": descriptions, "default": tools.run_python_tool(),
           "default_timeout_s": tools.DEFAULT_TIMEOUT_S}, sys.stdout)
