"""The run_python tool for language models, and the formatter of its results.

The tool's name, description and JSON Schema are those of cellvm's Go agent
package, read from ``run_python_tool.json``, which ``go generate ./clients``
writes from it (a Go test fails when the two drift). The formatter gives a
model what the Go agent loop gives it, character for character (a Go test
checks that too): stdout and stderr without terminal codes, long text cut
from the middle with the count stated, the end of a traceback, figures as
images, and a plain note when a cell timed out (saying whether variables
survived) or lost its interpreter.

::

    tools = [cellvm.tools.anthropic_tool()]
    ...
    out = cellvm.tools.run_tool_call(sbx, block["input"])
    content.append(cellvm.tools.anthropic_tool_result(out, block["id"]))

A human in the loop: pass ``approve``, called with the cell's code before
it runs, as Go's ``cellvm chat --confirm`` asks at the terminal. It returns
True to run the code, False (or None) to refuse (the model gets the refusal
as the call's result and nothing runs), or a string: the edited code, which
runs instead (the model is told what ran). An exception from it refuses
too, saying why. :func:`arun_tool_call` also takes an ``async`` approve::

    def approve(code):
        print(code)
        return input("run it? [y/n] ") == "y"

    out = cellvm.tools.run_tool_call(sbx, block["input"], approve=approve)
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from dataclasses import dataclass, field
import inspect
from typing import Any, Awaitable, Callable, Dict, List, Optional, Sequence, Tuple, Union

from .errors import Busy, CellvmError, Lost, NotFound, Timeout
from .models import Execution

_DEF_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run_python_tool.json")
with open(_DEF_PATH, encoding="utf-8") as _f:
    _DEF = json.load(_f)

TOOL_NAME: str = _DEF["name"]
INPUT_SCHEMA: Dict[str, Any] = _DEF["input_schema"]
#: The default time limit of a call, stated in the description (seconds).
DEFAULT_TIMEOUT_S: int = _DEF["default_timeout_s"]
#: The most a model may ask for with timeout_s (seconds), as in Go.
MAX_TIMEOUT_S = 600

# The formatter's bounds, as in Go's agent.FormatOptions defaults.
MAX_CHARS = 8000
TRACEBACK_LINES = 20
MAX_IMAGES = 4
MAX_IMAGE_BYTES = 5 << 20


def description(network: Optional[Sequence[str]] = None, timeout_s: Optional[int] = DEFAULT_TIMEOUT_S) -> str:
    """The run_python description for a sandbox with this allowlist (None
    or empty: no network) and default timeout (None: not stated)."""
    key = ("network" if network else "no_network") + ("" if timeout_s else "_no_timeout")
    d = _DEF["descriptions"][key]
    if network:
        d = d.replace("${network}", ", ".join(network))
    if timeout_s:
        d = d.replace("${timeout_s}", str(int(timeout_s)))
    return d


def run_python_tool(network: Optional[Sequence[str]] = None, timeout_s: Optional[int] = DEFAULT_TIMEOUT_S) -> Dict[str, Any]:
    """The tool as {name, description, input_schema}."""
    return {"name": TOOL_NAME, "description": description(network, timeout_s), "input_schema": json.loads(json.dumps(INPUT_SCHEMA))}


def anthropic_tool(network: Optional[Sequence[str]] = None, timeout_s: Optional[int] = DEFAULT_TIMEOUT_S) -> Dict[str, Any]:
    """The tool in Anthropic Messages' "tools" form."""
    return run_python_tool(network, timeout_s)


def openai_tool(network: Optional[Sequence[str]] = None, timeout_s: Optional[int] = DEFAULT_TIMEOUT_S) -> Dict[str, Any]:
    """The tool in OpenAI Chat Completions' "tools" form."""
    t = run_python_tool(network, timeout_s)
    return {"type": "function", "function": {"name": t["name"], "description": t["description"], "parameters": t["input_schema"]}}


@dataclass
class ToolOutput:
    """What a model gets back from one call: text, images (MIME, bytes),
    and whether it failed."""

    text: str
    images: List[Tuple[str, bytes]] = field(default_factory=list)
    is_error: bool = False


_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


def strip_ansi(s: str) -> str:
    """Removes terminal escape sequences and resolves carriage returns the
    way a terminal shows them (a redrawn progress bar becomes its last state)."""
    if "\x1b" in s:
        s = _ANSI.sub("", s).replace("\x1b", "")
    if "\r" not in s:
        return s
    lines = s.replace("\r\n", "\n").split("\n")
    for i, line in enumerate(lines):
        t = line.rstrip("\r")
        j = t.rfind("\r")
        lines[i] = line[j + 1:] if j >= 0 else t
    return "\n".join(lines)


def cut_note(cut: int) -> str:
    return f"\n... [{cut} characters cut from the middle] ...\n"


def clip_middle(s: str, limit: int) -> Tuple[str, int]:
    """Keeps the first and last parts of s so that at most limit characters
    of it remain, with a line stating how many were cut in between."""
    if limit < 1 or len(s) <= limit:
        return s, 0
    head = limit * 3 // 5
    tail = limit - head
    cut = len(s) - head - tail
    return s[:head] + cut_note(cut) + s[len(s) - tail:], cut


def _decoded_len(n: int) -> int:
    return n // 4 * 3


def _image(mime: str, data: str, have: int) -> Tuple[Optional[bytes], str]:
    if have >= MAX_IMAGES:
        return None, f"[a further {mime} image was produced but not attached: at most {MAX_IMAGES} images per call]"
    if _decoded_len(len(data)) > MAX_IMAGE_BYTES + 3:
        return None, (f"[a {mime} image of about {_decoded_len(len(data))} bytes was produced but not attached: "
                      f"larger than {MAX_IMAGE_BYTES} bytes; make the figure smaller]")
    try:
        raw = base64.b64decode(data.strip().replace("\r", "").replace("\n", ""), validate=True)
    except (binascii.Error, ValueError):
        return None, f"[a {mime} image was produced but its data is not valid base64]"
    if len(raw) > MAX_IMAGE_BYTES:
        return None, (f"[a {mime} image of {len(raw)} bytes was produced but not attached: "
                      f"larger than {MAX_IMAGE_BYTES} bytes; make the figure smaller]")
    return raw, ""


def _format_error(err: Dict[str, Any]) -> str:
    lines: List[str] = []
    for entry in err.get("traceback") or []:
        lines.extend(strip_ansi(str(entry)).rstrip("\n").split("\n"))
    dropped = max(len(lines) - TRACEBACK_LINES, 0)
    kept = lines[dropped:]
    out = ""
    if kept:
        out += "[traceback]\n"
        if dropped:
            out += f"... [{dropped} earlier traceback lines cut] ...\n"
        out += clip_middle("\n".join(kept), MAX_CHARS)[0] + "\n"
    value = clip_middle(strip_ansi(str(err.get("value", ""))), MAX_CHARS // 4)[0]
    return out + f"Error: {strip_ansi(str(err.get('name', '')))}: {value}\n"


def _status_note(r: Dict[str, Any]) -> str:
    # The words come from state_kept and killed_by, not from status alone
    # (see agent.statusNote, which this mirrors).
    status, killed_by = r.get("status"), r.get("killed_by")
    killed = killed_by in ("oom", "signal")
    if r.get("state_kept") and status != "lost" and not killed:
        if status == "timeout" or killed_by == "timeout":
            return ("Note: the cell ran past its time limit and was interrupted. The interpreter survived: variables "
                    "defined before the call are still there (and anything the cell assigned before the interrupt). "
                    "Do less per call, or pass a larger timeout_s.")
        return ""
    if killed_by == "timeout" or status == "timeout":
        return ("Note: the cell ran past its time limit and did not stop when interrupted, so the interpreter was "
                "killed and restarted: variables are gone, and so are imports and functions. Re-run the setup code "
                "before continuing.")
    if killed_by == "oom":
        return ("Note: the cell ran out of memory, so the interpreter was killed and restarted: variables are gone, "
                "and so are imports and functions. Use less memory (smaller data, chunks) and re-run the setup code.")
    if killed_by == "signal" or status == "lost":
        return ("Note: the interpreter was lost during this cell (it crashed, exited or was killed) and restarted: "
                "variables are gone, and so are imports and functions. Re-run the setup code before continuing.")
    return ("Note: this cell ran in a fresh interpreter (the previous one had ended): variables are gone, and so are "
            "imports and functions from earlier cells. Re-run the setup code before continuing.")


def format_execution(execution: Any) -> ToolOutput:
    """Turns an :class:`~cellvm.Execution` (or the daemon's result dict)
    into what a model reads."""
    r = execution.raw if isinstance(execution, Execution) else execution
    parts: List[str] = []

    def sep() -> None:
        if parts:
            parts.append("\n")

    def section(label: str, text: str, guest_cut: int) -> None:
        text = strip_ansi(text)
        if not text and not guest_cut:
            return
        clipped = clip_middle(text, MAX_CHARS)[0]
        sep()
        parts.append(f"[{label}]\n{clipped}")
        if not clipped.endswith("\n"):
            parts.append("\n")
        if guest_cut > 0:
            parts.append(f"[the sandbox cut {guest_cut} bytes from the middle of {label}]\n")

    trunc = r.get("truncated") or {}
    section("stdout", str(r.get("stdout") or ""), int(trunc.get("stdout_bytes") or 0))
    section("stderr", str(r.get("stderr") or ""), int(trunc.get("stderr_bytes") or 0))

    images: List[Tuple[str, bytes]] = []
    for i, d in enumerate(r.get("results") or []):
        data = d.get("data") or {}
        shown = False
        for mime in ("image/png", "image/jpeg"):
            if mime not in data:
                continue
            raw, note = _image(mime, str(data[mime]), len(images))
            if raw is not None:
                images.append((mime, raw))
                note = f"[image {len(images)}: {mime}, {len(raw)} bytes, attached]"
            sep()
            parts.append(note + "\n")
            shown = True
            break
        if "image/svg+xml" in data and not shown:
            parts.append(f"[an SVG image of {len(str(data['image/svg+xml']).encode('utf-8'))} bytes was produced; "
                         "it cannot be shown to you, use a PNG figure to see it]\n")
            shown = True
        if "text/plain" not in data or (shown and not d.get("main")):
            continue
        label = f"Out[{int(r.get('execution_count') or 0)}]" if d.get("main") else f"display {i + 1}"
        section(label, str(data["text/plain"]), 0)

    is_error = False
    if r.get("error"):
        is_error = True
        sep()
        parts.append(_format_error(r["error"]))
    note = _status_note(r)
    if note:
        is_error = is_error or r.get("status") != "ok"
        sep()
        parts.append(note + "\n")
    if not parts:
        parts.append("(the cell ran and printed nothing; print what you need to see)\n")
    return ToolOutput(text="".join(parts).rstrip("\n"), images=images, is_error=is_error)


def tool_error(message: str) -> ToolOutput:
    return ToolOutput(text="Tool error: " + message, is_error=True)


def _sandbox_error(e: CellvmError) -> ToolOutput:
    if isinstance(e, Busy):
        return tool_error(f"the sandbox is busy (another call is still running, or it is being paused or resumed); wait for it and try again: {e}")
    if isinstance(e, Lost):
        return tool_error(f"the sandbox's VM is gone; no more code can run in it and all state is lost: {e}")
    if isinstance(e, NotFound):
        return tool_error(f"not found: {e}")
    if isinstance(e, Timeout):
        return tool_error(f"the call was cancelled: {e}")
    return tool_error(str(e))


def _call_args(arguments: Any) -> Tuple[Optional[str], Optional[float], Optional[ToolOutput]]:
    if isinstance(arguments, (str, bytes)):
        try:
            arguments = json.loads(arguments or "{}")
        except ValueError as e:
            return None, None, tool_error(f"the arguments are not a JSON object: {e}")
    if not isinstance(arguments, dict):
        return None, None, tool_error("the arguments are not a JSON object")
    code = arguments.get("code")
    if not isinstance(code, str):
        return None, None, tool_error('run_python needs "code", a string of Python source')
    t = arguments.get("timeout_s", 0) or 0
    if not isinstance(t, int) or isinstance(t, bool):
        return None, None, tool_error("the arguments do not match the tool's schema: timeout_s is not an integer")
    if t == 0:
        return code, float(DEFAULT_TIMEOUT_S), None
    if t < 0 or t > MAX_TIMEOUT_S:
        return None, None, tool_error(f"timeout_s {t} out of range 1..{MAX_TIMEOUT_S}")
    return code, float(t), None


#: The most code a cell may carry (bytes of UTF-8), as the daemon allows.
MAX_CODE_BYTES = 1 << 20

#: What the model reads when approve refuses a cell (Go's agent.RefusedCode).
REFUSED: str = _DEF["refused"]

#: What approve returns: True runs the code, False or None refuses, a
#: string is the edited code to run instead.
Approval = Union[bool, str, None]


def _approval(code: str, answer: Any) -> Tuple[Optional[str], bool, Optional[ToolOutput]]:
    """Turns approve's answer into (code to run, edited, refusal)."""
    if answer is True:
        return code, False, None
    if answer is False or answer is None:
        return None, False, ToolOutput(text=REFUSED, is_error=True)
    if isinstance(answer, str):
        n = len(answer.encode("utf-8", "surrogatepass"))
        if n > MAX_CODE_BYTES:
            return None, False, tool_error(f"not run: the user's edited code is {n} bytes, at most {MAX_CODE_BYTES}")
        return answer, answer != code, None
    return None, False, tool_error(f"not run: approve returned {type(answer).__name__}, want True, False or the edited code")


def _note_edited(out: ToolOutput, code: str) -> ToolOutput:
    """Tells the model that what ran is the user's edit, as Go's agent does."""
    shown = clip_middle(code, MAX_CHARS)[0]
    out.text = f"[The user edited this code before it ran. What ran:]\n{shown}\n[Its result:]\n{out.text}"
    return out


def _approval_failed(e: Exception) -> ToolOutput:
    return tool_error(f"not run: asking the user for approval failed: {e}")


def run_tool_call(sbx: Any, arguments: Any, approve: Optional[Callable[[str], Approval]] = None) -> ToolOutput:
    """Runs one run_python call (arguments as a dict or JSON text) in a
    :class:`~cellvm.Sandbox`, after ``approve`` (if given) allows it. Never
    raises for what the model got wrong or the sandbox did: those are tool
    errors the model can read."""
    code, timeout, bad = _call_args(arguments)
    if bad:
        return bad
    edited = False
    if approve is not None:
        try:
            answer = approve(code)
        except Exception as e:  # the user's callback: its failure refuses
            return _approval_failed(e)
        code, edited, refused = _approval(code, answer)
        if refused:
            return refused
    try:
        out = format_execution(sbx.run_code(code, timeout=timeout))
    except CellvmError as e:
        return _sandbox_error(e)
    return _note_edited(out, code) if edited else out


async def arun_tool_call(sbx: Any, arguments: Any,
                         approve: Optional[Callable[[str], Union[Approval, Awaitable[Approval]]]] = None) -> ToolOutput:
    """:func:`run_tool_call` for an :class:`~cellvm.AsyncSandbox`; approve
    may be a coroutine function."""
    code, timeout, bad = _call_args(arguments)
    if bad:
        return bad
    edited = False
    if approve is not None:
        try:
            answer = approve(code)
            if inspect.isawaitable(answer):
                answer = await answer
        except Exception as e:  # the user's callback: its failure refuses
            return _approval_failed(e)
        code, edited, refused = _approval(code, answer)
        if refused:
            return refused
    try:
        out = format_execution(await sbx.run_code(code, timeout=timeout))
    except CellvmError as e:
        return _sandbox_error(e)
    return _note_edited(out, code) if edited else out


def anthropic_tool_result(out: ToolOutput, tool_use_id: str) -> Dict[str, Any]:
    """A tool_result content block for Anthropic's Messages API; images
    ride inside it as image blocks."""
    content: List[Dict[str, Any]] = [{"type": "text", "text": out.text or "(no output)"}]
    for mime, data in out.images:
        content.append({"type": "image", "source": {"type": "base64", "media_type": mime,
                                                    "data": base64.b64encode(data).decode("ascii")}})
    block: Dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id, "content": content}
    if out.is_error:
        block["is_error"] = True
    return block


def openai_tool_messages(results: Sequence[Tuple[str, str, ToolOutput]]) -> List[Dict[str, Any]]:
    """The messages answering one assistant turn's tool calls in OpenAI's
    Chat Completions: a "tool" message per (tool_call_id, name, output), in
    order, then, since tool messages carry only text, one user message with
    the images, each group introduced by the id of its call."""
    msgs: List[Dict[str, Any]] = []
    user: List[Dict[str, Any]] = []
    for call_id, name, out in results:
        text = out.text
        if out.is_error and not text.startswith("Tool error"):
            text = "Error:\n" + text
        if out.images:
            text += f"\n[{len(out.images)} image(s) from this call follow in the next user message]"
        msgs.append({"role": "tool", "tool_call_id": call_id, "content": text})
        if out.images:
            user.append({"type": "text", "text": f"Images produced by tool call {call_id} ({name}):"})
            for mime, data in out.images:
                user.append({"type": "image_url",
                             "image_url": {"url": f"data:{mime};base64," + base64.b64encode(data).decode("ascii")}})
    if user:
        msgs.append({"role": "user", "content": user})
    return msgs
