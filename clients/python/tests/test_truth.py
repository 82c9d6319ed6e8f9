"""The compat layers tell the truth about the interpreter's variables:
their words come from state_kept and killed_by, never from cellvm's status
alone. Plain unit tests over results as the daemon sends them (no daemon)."""

import unittest

from cellvm.compat._truth import lost_cause, lost_note
from cellvm.compat.boxlite import cell_output
from cellvm.compat.withruntime import Interpreter
from cellvm.models import Execution

# As the guest reports a cell that ignored SIGINT past the grace period.
KILLED_TIMEOUT = {
    "status": "timeout", "state_kept": False, "killed_by": "timeout", "stdout": "started\n", "stderr": "",
    "results": [], "execution_count": 4, "duration_ms": 4000,
    "error": {"name": "TimeoutError", "value": "the cell ran past its time limit and did not stop within 2s of the "
              "interrupt; the interpreter was killed and restarted, so all variables and imports are lost",
              "traceback": []},
}
INTERRUPTED_TIMEOUT = dict(KILLED_TIMEOUT, state_kept=True, error={
    "name": "TimeoutError", "value": "the cell ran past its time limit and was interrupted; variables and imports are kept",
    "traceback": ["KeyboardInterrupt"]})
# The host's deadline passed with no answer from the guest: unknown, so not kept.
HOST_DEADLINE = dict(KILLED_TIMEOUT, error={"name": "TimeoutError", "value": "cellvm: the guest did not answer ...; "
                                            "its variables may be gone", "traceback": []})
OOM = dict(KILLED_TIMEOUT, status="error", killed_by="oom",
           error={"name": "OutOfMemory", "value": "killed", "traceback": []})
CRASH = dict(KILLED_TIMEOUT, status="lost", killed_by="signal",
             error={"name": "InterpreterLost", "value": "signal 11", "traceback": []})
EXITED = dict(KILLED_TIMEOUT, status="lost", killed_by=None,
              error={"name": "InterpreterLost", "value": "exited with status 3", "traceback": []})
FRESH = {"status": "ok", "state_kept": False, "killed_by": None, "stdout": "1\n",
         "stderr": "cellvm: the interpreter had exited since the last cell; ...\n", "results": [], "error": None}
OK = {"status": "ok", "state_kept": True, "killed_by": None, "stdout": "1\n", "stderr": "", "results": [], "error": None}
# An answer without state_kept (an older daemon, a partial result): not a promise.
NO_FIELD = {"status": "timeout", "stdout": "", "stderr": "", "results": [], "error": None}


class RuntimeStatusTest(unittest.TestCase):
    def outcome(self, raw):
        return Interpreter(None)._outcome(Execution(raw))

    def test_a_killed_interpreter_is_lost(self):
        for name, raw in [("killed timeout", KILLED_TIMEOUT), ("host deadline", HOST_DEADLINE), ("oom", OOM),
                          ("crash", CRASH), ("exited", EXITED), ("no state_kept", NO_FIELD)]:
            out = self.outcome(raw)
            self.assertEqual(out["status"], "lost", name)
            self.assertFalse(out["state_kept"], name)
        self.assertEqual(self.outcome(KILLED_TIMEOUT)["killed_by"], "timeout")

    def test_an_interrupted_timeout_stays_a_timeout(self):
        out = self.outcome(INTERRUPTED_TIMEOUT)
        self.assertEqual((out["status"], out["state_kept"], out["killed_by"]), ("timeout", True, "timeout"))

    def test_plain_cells_keep_their_status(self):
        self.assertEqual(self.outcome(OK)["status"], "ok")
        # A fresh interpreter: the cell itself ran; state_kept says the rest.
        out = self.outcome(FRESH)
        self.assertEqual((out["status"], out["state_kept"]), ("ok", False))


class BoxLiteOutputTest(unittest.TestCase):
    def test_a_killed_interpreter_says_variables_are_gone(self):
        for name, raw in [("killed timeout", KILLED_TIMEOUT), ("host deadline", HOST_DEADLINE), ("oom", OOM),
                          ("crash", CRASH), ("exited", EXITED), ("fresh", FRESH)]:
            out = cell_output(Execution(raw))
            self.assertTrue(out.endswith("variables are gone; re-run the setup code.\n"), (name, out))
        out = cell_output(Execution(KILLED_TIMEOUT))
        self.assertTrue(out.startswith("started\nTimeoutError: the cell ran past"), out)
        self.assertIn("did not stop when interrupted, so the interpreter was killed and restarted", out)

    def test_kept_state_adds_nothing(self):
        self.assertEqual(cell_output(Execution(OK)), "1\n")
        out = cell_output(Execution(INTERRUPTED_TIMEOUT))
        self.assertNotIn("variables are gone", out)
        self.assertEqual(cell_output(Execution(dict(OK, stdout="no newline"))), "no newline")

    def test_note_on_its_own_line(self):
        out = cell_output(Execution(dict(CRASH, stdout="partial", error=None)))
        self.assertEqual(out.splitlines()[0], "partial")


class LostCauseTest(unittest.TestCase):
    def test_words(self):
        self.assertIsNone(lost_cause(Execution(OK)))
        self.assertEqual(lost_note(Execution(INTERRUPTED_TIMEOUT)), "")
        self.assertIn("out of memory", lost_cause(Execution(OOM)))
        self.assertIn("time limit", lost_cause(Execution(KILLED_TIMEOUT)))


if __name__ == "__main__":
    unittest.main()
