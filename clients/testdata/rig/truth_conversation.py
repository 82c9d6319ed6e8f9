# A data analyst's conversation through cellvm.compat.withruntime, the
# shape of the seeds' second program (a model loads data, looks at it,
# runs a slow step that times out, then goes on with what it defined): run
# ROUNDS times on a loaded host. Each cell prints one JSON line; the Go
# test checks that every result told the truth: after a timeout that says
# the state was kept the variables are there, and after one that says
# "lost" the next cell gets a NameError, never the other way round.
import json
import sys

from cellvm.compat.withruntime import Sandbox

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
CELLS = [
    ("load", "import numpy as np\nimport pandas as pd\nrng = np.random.default_rng(0)\n"
             "df = pd.DataFrame(rng.normal(size=(200_000, 8)), columns=list('abcdefgh'))\nprint(df.shape)", 300_000),
    ("look", "summary = df.describe()\nprint(summary.loc['mean'].round(2).to_dict())", 120_000),
    # A slow step: Python-level work, so an interrupt lands between bytecodes.
    ("slow_python", "total = 0\nfor i in range(10**10):\n    total += i", 3_000),
    ("after_python", "print(df.shape, len(summary))", 120_000),
    # A slow C-level step: the interrupt waits until the C call returns.
    ("slow_c", "m = rng.normal(size=(3000, 3000))\nfor _ in range(50):\n    m = m @ m.T\n    m /= np.abs(m).max()", 3_000),
    ("after_c", "print(df.shape, len(summary))", 120_000),
    # A cell that ignores the interrupt: it must be killed and say so.
    ("ignores", "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass", 3_000),
    ("after_ignores", "print(df.shape, len(summary))", 120_000),
]

for rnd in range(ROUNDS):
    with Sandbox.create(memory_mib=2048, network={"internet": False}) as sbx:
        for name, code, timeout_ms in CELLS:
            out = sbx.interpreter.run(code, timeout_ms=timeout_ms)
            err = out["error"] or {}
            print(json.dumps({"round": rnd, "cell": name, "status": out["status"], "state_kept": out["state_kept"],
                              "killed_by": out["killed_by"], "error": err.get("name"), "value": err.get("value"),
                              "stdout": out["stdout"][-200:], "duration_ms": out["duration_ms"]}), flush=True)
