# The result's truth after a cell that ignores SIGINT (issue 25), in ONE
# sandbox: the core result, the tool loop's text (cellvm.tools, checked
# against package agent on the host), the Runtime compat's status, and the
# NameError of the next cell. One JSON line per check for the Go test.
import json

from cellvm import tools
from cellvm.compat.withruntime import Sandbox

IGNORES = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass"


def line(**kw):
    print(json.dumps(kw), flush=True)


with Sandbox.create(memory_mib=512, network={"internet": False}) as sbx:
    native = sbx._native
    native.run_code("x = 41", timeout=120)
    ex = native.run_code(IGNORES, timeout=2)
    line(check="core", raw=ex.raw, tool_text=tools.format_execution(ex).text)
    ex = native.run_code("print(x)", timeout=120)
    line(check="core_next", error=ex.error.name if ex.error else None, state_kept=ex.state_kept)

    sbx.interpreter.run("y = 1", timeout_ms=120_000)
    out = sbx.interpreter.run(IGNORES, timeout_ms=2_000)
    line(check="runtime", status=out["status"], state_kept=out["state_kept"], killed_by=out["killed_by"])
    out = sbx.interpreter.run("print(y)", timeout_ms=120_000)
    line(check="runtime_next", status=out["status"], error=(out["error"] or {}).get("name"))
