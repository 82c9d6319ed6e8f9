"""What a cell's result says about the interpreter's variables, in words
every compat layer uses.

cellvm's result carries the truth in two fields: ``state_kept`` (did the
interpreter's variables survive the cell) and ``killed_by`` (what, if
anything, killed the interpreter: "timeout", "oom", "signal"). ``status``
alone is not enough: "timeout" covers both a cell that was interrupted
(variables kept) and one that ignored the interrupt and was killed
(variables gone), and other interfaces read "timeout" as "kept". So the
compat layers derive what they tell a program from the two fields, never
from ``status`` alone.
"""

from __future__ import annotations

from typing import Optional

from ..models import Execution

#: The words each killer gets; the notes all say "variables are gone".
_CAUSES = {
    "timeout": "the cell ran past its time limit and did not stop when interrupted, so the interpreter was killed "
               "and restarted",
    "oom": "the cell ran out of memory, so the interpreter was killed and restarted",
    "signal": "the interpreter was killed during the cell and restarted",
}


def lost_cause(ex: Execution) -> Optional[str]:
    """Why the interpreter's variables are gone after this cell, or None
    when they were kept. A result that does not say it kept them (an older
    or partial answer without ``state_kept``) counts as gone: a program
    told "kept" wrongly fails later with a NameError it cannot explain."""
    if ex.state_kept and ex.status != "lost":
        return None
    if ex.killed_by in _CAUSES:
        return _CAUSES[ex.killed_by]
    if ex.status == "lost":
        return "the interpreter was lost during the cell (it crashed or exited) and restarted"
    if ex.status == "timeout":
        return "the cell ran past its time limit and the interpreter could not be shown to have survived"
    return "the cell ran in a fresh interpreter (the previous one had ended)"


def lost_note(ex: Execution) -> str:
    """One line for a person or a model, "" when variables were kept."""
    cause = lost_cause(ex)
    if cause is None:
        return ""
    return f"cellvm: {cause}: variables are gone; re-run the setup code.\n"
