"""cellvm cell driver: one long-lived Python process that runs cells.

The Go supervisor (guestinit/interp) starts this file with the configured
python and speaks to it over two pipes, described in PROTOCOL.md:

  fd CTL (read):  NDJSON commands from the supervisor  {"op": "exec", ...}
  fd EV  (write): NDJSON events to the supervisor      {"ev": "result", ...}

fd 1 and fd 2 are pipes read directly by the supervisor, so everything a cell
writes, including C code and subprocesses, is captured and streamed without
passing through this file. fd 0 is /dev/null.

Cells have notebook semantics: the code is parsed as a module, the
statements run in one namespace that lives as long as this process, and a
final expression statement is evaluated and shown as the cell's main result.

It runs on Python 3.8 and later with the standard library alone (an image's
own python3); IPython, NumPy and matplotlib are used only when a cell has
imported them or they can be imported.
"""

import sys

if sys.version_info < (3, 8):
    # Checked before anything else (this much parses on any Python 3): the
    # supervisor turns the frame into the cells' "InterpreterTooOld" error.
    try:
        import os
        os.write(int(sys.argv[2]), ('{"ev": "unsupported", "version": "%d.%d.%d"}\n'
                                    % tuple(sys.version_info[:3])).encode("ascii"))
    finally:
        sys.exit(3)

import ast
import asyncio
import base64
import builtins
import io
import json
import linecache
import os
import re
import signal
import tokenize
import traceback
import types
import warnings

DRIVER_FILE = os.path.abspath(__file__)
# Notebook syntax (shell escapes, magics) is handled by this file next to
# the driver, loaded for the first cell that needs it.
NOTEBOOK_FILE = os.path.join(os.path.dirname(DRIVER_FILE), "cellvm_notebook.py")
# A cell that is not valid Python and matches this may have notebook syntax:
# `!` or `%` at the start of a line (after blanks), or after an `=`.
_MAY_HAVE_NOTEBOOK_SYNTAX = re.compile(r"(^|=)[ \t]*[!%]", re.MULTILINE)
MAIN_PID = os.getpid()

# Bounds on what one result may carry; the supervisor enforces its own too.
MAX_TEXT = int(os.environ.pop("CELLVM_MAX_TEXT", str(1 << 20)))

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]|\x1b")


def _plain(s):
    """Returns s without terminal escape sequences."""
    return _ANSI.sub("", s)


def _clip_text(s):
    if len(s) <= MAX_TEXT:
        return s
    half = MAX_TEXT // 2
    return "%s\n... [%d characters cut] ...\n%s" % (s[:half], len(s) - 2 * half, s[-half:])


class Channel:
    """NDJSON frames over the control and event pipes."""

    def __init__(self, ctl_fd, ev_fd):
        os.set_inheritable(ctl_fd, False)
        os.set_inheritable(ev_fd, False)
        self.ctl_fd = ctl_fd
        self.ev_fd = ev_fd
        self.ctl = os.fdopen(ctl_fd, "rb", buffering=1 << 16)

    def send(self, obj):
        if os.getpid() != MAIN_PID:
            return  # a forked child never speaks for the driver
        data = memoryview((json.dumps(obj) + "\n").encode("ascii"))
        # A KeyboardInterrupt between two writes would leave half a frame
        # on the pipe; hold SIGINT until the frame is whole.
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            while data:
                n = os.write(self.ev_fd, data)
                data = data[n:]
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def recv(self):
        line = self.ctl.readline()
        if not line:
            return None
        return json.loads(line)


class Driver:
    def __init__(self, chan):
        self.chan = chan
        self.in_user_code = False
        self.cell_active = False
        self.interrupt_pending = False
        self.shown_figures = set()
        self.loop = None
        self.notebook = None  # the notebook module once loaded; False if it cannot be
        self.shell = None
        self.ns = self._make_namespace()

    # ----- setup -----------------------------------------------------------

    def _make_namespace(self):
        # The user's namespace is a fresh __main__ module, so pickle and
        # multiprocessing find classes and functions defined in cells.
        mod = types.ModuleType("__main__")
        mod.__dict__["__builtins__"] = builtins
        sys.modules["__main__"] = mod
        return mod.__dict__

    def setup(self):
        sys.path[0] = ""  # import from the working directory, as notebooks do
        signal.signal(signal.SIGINT, self._on_sigint)
        builtins.input = _no_input
        builtins.display = self.display
        sys.meta_path.insert(0, _IPythonDisplayHook(self.display))
        warnings.filterwarnings("ignore", message=".*non-GUI backend.*")
        warnings.filterwarnings("ignore", message=".*FigureCanvasAgg is non-interactive.*")
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.reconfigure(write_through=True, errors="backslashreplace")
            except Exception:
                pass
        dev_null = os.open(os.devnull, os.O_RDWR)

        def after_fork_in_child():
            # The child must never read commands or write events: point the
            # protocol fds at /dev/null (keeping the numbers taken, so files
            # the child opens later do not land on them).
            os.dup2(dev_null, self.chan.ctl_fd)
            os.dup2(dev_null, self.chan.ev_fd)

        os.register_at_fork(after_in_child=after_fork_in_child)

    def _on_sigint(self, signum, frame):
        # Interrupts only land in user code. One that arrives while the
        # cell is being compiled is held until its code starts; between
        # cells, and while the driver reports, they are dropped.
        if self.in_user_code:
            raise KeyboardInterrupt
        if self.cell_active:
            self.interrupt_pending = True

    def _enter_user_code(self):
        self.in_user_code = True
        if self.interrupt_pending:
            self.interrupt_pending = False
            raise KeyboardInterrupt

    # ----- main loop -------------------------------------------------------

    def serve(self):
        self.chan.send({"ev": "ready", "pid": os.getpid(), "version": sys.version.split()[0]})
        while True:
            msg = self.chan.recv()
            if msg is None:
                return
            op = msg.get("op")
            if op == "exec":
                self.run_cell(int(msg.get("n", 0)), str(msg.get("code", "")))
            elif op == "reap":
                self.chan.send({"ev": "reaped", "n": _reap_children()})
            elif op == "reseed":
                self.chan.send({"ev": "reseeded", "numpy": _reseed()})
            else:
                self.chan.send({"ev": "bad", "op": str(op)})

    def run_cell(self, n, code):
        filename = "<cell-%d>" % n
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        self.shown_figures = set()
        status, interrupted = "ok", False
        self.cell_active = True
        self.interrupt_pending = False
        # The supervisor sends SIGINT only after this frame, so an
        # interrupt can never hit the previous cell or the idle loop.
        self.chan.send({"ev": "started", "n": n})
        try:
            self._prepare_signals()
            status = self._execute(code, filename)
        except KeyboardInterrupt as e:
            self.in_user_code = False
            interrupted = True
            status = "error"
            self.report_error(e)
        except SystemExit as e:
            self.in_user_code = False
            if e.code not in (None, 0):
                status = "error"
                self.report_error(e)
        except BaseException as e:  # noqa: B902 - everything is a result
            self.in_user_code = False
            status = "error"
            self.report_error(e)
        finally:
            self.in_user_code = False
        if os.getpid() != MAIN_PID:
            # A cell forked (os.fork) and this is the child reaching the end
            # of the cell: it must not go on to serve commands.
            _flush_all()
            os._exit(0 if status == "ok" else 1)
        try:
            self._flush_figures()
        except BaseException as e:
            _write_stderr("cellvm: could not render figures: %s: %s\n" % (type(e).__name__, e))
        _flush_all()
        self.cell_active = False
        self.interrupt_pending = False
        self.chan.send({"ev": "done", "status": status, "interrupted": interrupted})

    def _prepare_signals(self):
        # A previous cell may have replaced the handler or masked SIGINT.
        signal.signal(signal.SIGINT, self._on_sigint)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    def _execute(self, code, filename):
        flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        try:
            tree = compile(code, filename, "exec", ast.PyCF_ONLY_AST | flags, dont_inherit=True)
            source = None
        except SyntaxError:
            source = self._notebook_source(code)
            if source is None:
                raise
        if source is not None:
            # A syntax error here is one of the transformed cell; its line
            # numbers are the cell's (the transformation keeps them).
            tree = compile(source, filename, "exec", ast.PyCF_ONLY_AST | flags, dont_inherit=True)
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        body = compile(tree, filename, "exec", flags, dont_inherit=True)
        expr = compile(last, filename, "eval", flags, dont_inherit=True) if last else None

        try:
            self._enter_user_code()
            self._run_code(body)
            value = self._run_code(expr) if expr else None
        finally:
            self.in_user_code = False
        if value is not None and not _ends_with_semicolon(code):
            self.ns["_"] = value
            self.publish(value, main=True)
        return "ok"

    def _notebook_source(self, code):
        """The Python source for a cell with notebook syntax (`!cmd`,
        `%magic`, `%%magic`), or None: plain Python, or no IPython."""
        if not _MAY_HAVE_NOTEBOOK_SYNTAX.search(code):
            return None
        if self.notebook is None:
            self.notebook = _load_notebook() or False
            if self.notebook:
                self.shell = self.notebook.Shell(self.ns, lambda data: self._send_bundle(data, main=False))
        if not self.notebook:
            return None
        try:
            source = self.notebook.transform_cell(code)
        except Exception:
            return None
        if source is None and getattr(self.notebook, "_transformer", None) is False:
            _write_stderr("cellvm: `!cmd` and `%magic` need IPython, which this interpreter cannot import; "
                          "run commands with subprocess (or the sandbox's exec) instead\n")
        if source is not None:
            shell = self.shell
            self.ns["get_ipython"] = lambda: shell
        return source

    def _run_code(self, code):
        result = eval(code, self.ns)
        if _is_coroutine_code(code) and asyncio.iscoroutine(result):
            # The cell used top-level await.
            if self.loop is None or self.loop.is_closed():
                self.loop = asyncio.new_event_loop()
            result = self.loop.run_until_complete(result)
        return result

    # ----- rich output -----------------------------------------------------

    def display(self, *objs, include=None, exclude=None, raw=False, **_ignored):
        """Shows each object as an extra rich result of the cell."""
        for obj in objs:
            if raw and isinstance(obj, dict):
                self._send_bundle({str(k): _as_text(k, v) for k, v in obj.items()}, main=False)
            else:
                self.publish(obj, main=False)

    def publish(self, obj, main):
        self._send_bundle(self.mimebundle(obj), main)

    def _send_bundle(self, data, main):
        data = {k: v for k, v in data.items() if isinstance(v, str)}
        if data:
            self.chan.send({"ev": "result", "main": bool(main), "data": data})

    def mimebundle(self, obj):
        data = {}
        if _is_figure(obj):
            png = _figure_png(obj)
            self.shown_figures.add(id(obj))
            data["image/png"] = png
            data["text/plain"] = "<Figure>"
            return data
        method = _repr_method(obj, "_repr_mimebundle_")
        if method is not None:
            try:
                got = method(include=None, exclude=None)
                if isinstance(got, tuple):
                    got = got[0]
                if isinstance(got, dict):
                    for k, v in got.items():
                        data[str(k)] = _as_text(k, v)
            except Exception:
                pass
        for mime, name in _REPR_METHODS:
            if mime in data:
                continue
            method = _repr_method(obj, name)
            if method is None:
                continue
            try:
                got = method()
            except Exception:
                continue
            if isinstance(got, tuple):  # (data, metadata)
                got = got[0]
            if got is not None:
                data[mime] = _as_text(mime, got)
        if "text/plain" not in data:
            data["text/plain"] = _clip_text(repr(obj))
        return data

    def _flush_figures(self):
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None:
            return
        try:
            for num in plt.get_fignums():
                fig = plt.figure(num)
                if id(fig) in self.shown_figures:
                    continue
                self._send_bundle({"image/png": _figure_png(fig), "text/plain": "<Figure>"}, main=False)
        finally:
            plt.close("all")

    # ----- errors ----------------------------------------------------------

    def report_error(self, exc):
        self.chan.send({
            "ev": "error",
            "name": type(exc).__name__,
            "value": _plain(_clip_text(_safe_str(exc))),
            "traceback": _format_traceback(exc),
        })


_REPR_METHODS = (
    ("text/html", "_repr_html_"),
    ("image/png", "_repr_png_"),
    ("image/jpeg", "_repr_jpeg_"),
    ("image/svg+xml", "_repr_svg_"),
    ("application/json", "_repr_json_"),
    ("text/markdown", "_repr_markdown_"),
    ("text/latex", "_repr_latex_"),
)


def _repr_method(obj, name):
    # Classes themselves (a DataFrame class, not an instance) are shown by
    # repr only: their _repr_*_ attributes are unbound functions.
    if isinstance(obj, type):
        return None
    try:
        method = getattr(obj, name, None)
    except Exception:
        return None
    return method if callable(method) else None


def _as_text(mime, value):
    mime = str(mime)
    if isinstance(value, (bytes, bytearray)):
        if mime.startswith("image/") and mime != "image/svg+xml":
            return base64.b64encode(bytes(value)).decode("ascii")
        return _clip_text(bytes(value).decode("utf-8", "replace"))
    if mime == "application/json" and not isinstance(value, str):
        return _clip_text(json.dumps(value, default=repr))
    if isinstance(value, str):
        if mime.startswith("image/") and mime != "image/svg+xml":
            return value  # already base64, as Jupyter expects
        return _clip_text(value)
    return _clip_text(str(value))


def _is_figure(obj):
    cls = type(obj)
    return cls.__name__ == "Figure" and cls.__module__.startswith("matplotlib.")


def _figure_png(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _is_coroutine_code(code):
    return bool(code.co_flags & 0x80)  # CO_COROUTINE


def _ends_with_semicolon(code):
    """A trailing ';' hides the main result, as in IPython."""
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):
        return False
    skip = {tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT, tokenize.ENDMARKER,
            tokenize.DEDENT, tokenize.INDENT}
    for tok in reversed(toks):
        if tok.type in skip:
            continue
        return tok.type == tokenize.OP and tok.string == ";"
    return False


def _safe_str(exc):
    try:
        return str(exc)
    except Exception:
        return "<exception str() failed>"


def _is_cell_file(filename):
    return filename.startswith("<cell-")


def _trim_stack(te):
    """Drops the driver's own frames, and whatever ran before the first cell
    frame (asyncio plumbing), from te and the exceptions chained to it."""
    seen = set()
    todo = [te]
    while todo:
        t = todo.pop()
        if t is None or id(t) in seen:
            continue
        seen.add(id(t))
        frames = [f for f in t.stack if f.filename not in (DRIVER_FILE, NOTEBOOK_FILE)]
        for i, f in enumerate(frames):
            if _is_cell_file(f.filename):
                frames = frames[i:]
                break
        t.stack = traceback.StackSummary.from_list(frames)
        todo.extend([t.__cause__, t.__context__])
        todo.extend(getattr(t, "exceptions", None) or [])


def _traceback_exception(exc):
    try:
        return traceback.TracebackException(type(exc), exc, exc.__traceback__, compact=True)  # py38: ok
    except TypeError:  # Python < 3.10 has no compact (it only saves time)
        return traceback.TracebackException(type(exc), exc, exc.__traceback__)


def _format_traceback(exc):
    try:
        te = _traceback_exception(exc)
        _trim_stack(te)
        return [_plain(_clip_text(s.rstrip("\n"))) for s in te.format()]
    except Exception as e:  # never fail the report itself
        return ["%s: %s (traceback unavailable: %s)" % (type(exc).__name__, _safe_str(exc), e)]


def _load_notebook():
    """Loads cellvm_notebook.py (see there); None if it cannot be."""
    try:
        import importlib.util
        spec = importlib.util.spec_from_file_location("_cellvm_notebook", NOTEBOOK_FILE)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        sys.modules[spec.name] = mod
        return mod
    except Exception as e:
        _write_stderr("cellvm: notebook syntax is not available: %s: %s\n" % (type(e).__name__, e))
        return None


def _no_input(prompt=""):
    raise EOFError(
        "input() is not available: cells run without a terminal and stdin is empty. "
        "Put the data in the code, or read it from a file.")


def _reseed():
    """Draws new seeds for Python's random module and, if a cell imported
    it, NumPy's global generator, from the kernel (os.urandom): a VM
    restored from a snapshot would otherwise repeat its parent's numbers.
    Says whether NumPy's was reseeded."""
    import random
    random.seed()
    np = sys.modules.get("numpy")
    if np is None:
        return False
    try:
        np.random.seed()
        return True
    except Exception:
        return False


def _reap_children():
    """Collects exit statuses of children the supervisor killed after an
    interrupted cell, so they do not linger as zombies."""
    n = 0
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return n
        if pid == 0:
            return n
        n += 1


def _flush_all():
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:
            pass
    try:  # C stdio buffers of extension modules
        import ctypes
        ctypes.CDLL(None).fflush(None)
    except Exception:
        pass


def _write_stderr(s):
    try:
        sys.__stderr__.write(s)
    except Exception:
        pass


class _IPythonDisplayHook:
    """Makes IPython.display.display (which, without a running IPython
    shell, only prints) publish rich results like the display() builtin."""

    NAME = "IPython.core.display_functions"

    def __init__(self, display):
        self.display = display

    def find_spec(self, name, path, target=None):
        if name != self.NAME:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module
        display = self.display

        def exec_module(module):
            original(module)
            module.display = display

        loader.exec_module = exec_module
        return spec


def main(argv):
    ctl_fd, ev_fd = int(argv[1]), int(argv[2])
    as_limit = int(os.environ.pop("CELLVM_RLIMIT_AS", "0"))
    if as_limit > 0:
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (as_limit, as_limit))
    driver = Driver(Channel(ctl_fd, ev_fd))
    driver.setup()
    driver.serve()


if __name__ == "__main__":
    main(sys.argv)
