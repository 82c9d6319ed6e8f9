"""cellvm notebook syntax: shell escapes and magics in cells.

The driver (cellvm_driver.py) loads this file only for a cell that is not
valid Python and has a line starting with `!` or `%` (or `= !`, `= %`), so
plain cells never pay for it. Such a cell is turned into Python source by
IPython's own input transformers (IPython.core.inputtransformer2, loaded by
itself: the IPython package, which takes about 0.4 s to import, is not), so
`!cmd`, `x = !cmd`, `%magic args` and `%%magic` mean what they mean in
Jupyter. The source they produce calls `get_ipython().system(...)`,
`.getoutput(...)`, `.run_line_magic(...)` and `.run_cell_magic(...)`; those
calls reach the small Shell below, not an IPython shell. It runs commands
with subprocess in the interpreter's own process group and cgroup, with the
cell's fds 1 and 2, so their output streams like print and an interrupt or
timeout of the cell ends them too.

Line numbers are kept: a line that IPython joins from backslash-continued
lines is followed by blank lines for the ones it swallowed, and blank lines
before a cell magic are kept, so line N of the transformed source is line N
of the cell and tracebacks point at the user's lines.
"""

import ast
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import threading
import time

NOTEBOOK_FILE = os.path.abspath(__file__)

# A line that IPython's transformers could change: a shell escape or a magic
# at the start of a line, or after an assignment (`x = !ls`, `t = %time f()`).
MAY_HAVE_SYNTAX = re.compile(r"(^|=)[ \t]*[!%]", re.MULTILINE)

_transformer = None  # the TransformerManager, once loaded; False if IPython is missing


class UsageError(Exception):
    """A magic that does not exist, or was given arguments it cannot use."""


UsageError.__module__ = "cellvm"  # tracebacks say cellvm.UsageError


class PipError(Exception):
    """%pip failed for a reason the sandbox explains (no network)."""


PipError.__module__ = "cellvm"


def _load_inputtransformer2():
    """Loads IPython.core.inputtransformer2 without importing the IPython
    package (it needs only the standard library); None if not installed."""
    spec = importlib.util.find_spec("IPython")  # finds, does not import
    if spec is None or not spec.submodule_search_locations:
        return None
    for base in spec.submodule_search_locations:
        path = os.path.join(base, "core", "inputtransformer2.py")
        if os.path.exists(path):
            mod_spec = importlib.util.spec_from_file_location("_cellvm_inputtransformer2", path)
            mod = importlib.util.module_from_spec(mod_spec)
            mod_spec.loader.exec_module(mod)
            sys.modules[mod_spec.name] = mod
            return mod
    return None


def _make_transformer():
    it2 = _load_inputtransformer2()
    if it2 is None:
        return None

    def keep_line_count(cls):
        class KeepLineCount(cls):
            def transform(self, lines):
                new = super().transform(lines)
                lost = len(lines) - len(new)
                if lost > 0:
                    at = self.start_line + 1
                    new = new[:at] + ["\n"] * lost + new[at:]
                return new
        KeepLineCount.__name__ = cls.__name__
        return KeepLineCount

    tm = it2.TransformerManager()
    # Leading blank lines are dropped by transform_cell below, not here, so
    # that they can be put back.
    tm.cleanup_transforms = [t for t in tm.cleanup_transforms if t is not it2.leading_empty_lines]
    tm.token_transformers = [keep_line_count(c) for c in tm.token_transformers]
    return tm


def transform_cell(code):
    """Returns the Python source for a cell with notebook syntax, or None
    when IPython is not installed or the cell has none."""
    global _transformer
    if _transformer is None:
        try:
            _transformer = _make_transformer() or False
        except Exception:  # an IPython we cannot use: plain Python only
            _transformer = False
    if not _transformer:
        return None
    lines = code.splitlines(True)
    blank = 0
    while blank < len(lines) and not lines[blank].strip():
        blank += 1
    out = "\n" * blank + _transformer.transform_cell("".join(lines[blank:]))
    if out.rstrip("\n") == code.rstrip("\n"):
        return None
    return out


# ----- the shell behind get_ipython() ----------------------------------------


def _expand(text, ns):
    """IPython's variable expansion in commands: {expr} and $name take
    their values from the user's namespace; $$ is a dollar sign. What does
    not evaluate is left as written (shell ${VAR}, awk '{print $1}')."""

    def brace(m):
        try:
            return str(eval(m.group(1), ns))
        except Exception:
            return m.group(0)

    def dollar(m):
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return str(ns[name]) if name in ns else m.group(0)

    text = re.sub(r"\{([^{}]+)\}", brace, text)
    return re.sub(r"\$\$|\$([A-Za-z_][A-Za-z0-9_]*)", dollar, text)


def _fd_of(stream):
    try:
        return stream.fileno()
    except Exception:
        return -1


def _flush():
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except Exception:
            pass


def _copy(src, dst):
    for chunk in iter(lambda: src.read1(65536), b""):
        try:
            dst.write(chunk.decode("utf-8", "replace"))
        except Exception:
            pass


def _run(argv, stdin=None, capture=False):
    """Runs argv in the interpreter's process group. Output goes to the
    cell's fd 1 and 2 directly, or through sys.stdout/sys.stderr if a cell
    replaced them; with capture, stdout is returned. An interrupt kills the
    command and is raised on."""
    _flush()
    out = subprocess.PIPE if capture or _fd_of(sys.stdout) != 1 else None
    err = subprocess.PIPE if _fd_of(sys.stderr) != 2 else None
    inp = subprocess.PIPE if stdin is not None else subprocess.DEVNULL
    with subprocess.Popen(argv, stdin=inp, stdout=out, stderr=err) as p:
        threads = []
        captured = []
        try:
            if err is not None:
                threads.append(threading.Thread(target=_copy, args=(p.stderr, sys.stderr), daemon=True))
            if out is not None and not capture:
                threads.append(threading.Thread(target=_copy, args=(p.stdout, sys.stdout), daemon=True))
            if out is not None and capture:
                threads.append(threading.Thread(target=lambda: captured.append(p.stdout.read()), daemon=True))
            for t in threads:
                t.start()
            if stdin is not None:
                try:
                    p.stdin.write(stdin.encode("utf-8", "surrogateescape"))
                    p.stdin.close()
                except BrokenPipeError:
                    pass
            rc = p.wait()
            for t in threads:
                t.join()
        except KeyboardInterrupt:
            p.kill()
            p.wait()
            # Raised afresh: the frames inside subprocess tell the user nothing.
            raise KeyboardInterrupt from None
        except BaseException:
            p.kill()
            p.wait()
            raise
    text = b"".join(captured).decode("utf-8", "replace") if capture else None
    return rc, text


def _shell_argv(cmd):
    if not os.path.exists("/bin/sh"):  # a distroless image
        raise UsageError("shell commands (`!cmd`, %%pip) run /bin/sh, which this image does not have; "
                         "use subprocess with a program's path instead")
    return ["/bin/sh", "-c", cmd]


class Shell:
    """What get_ipython() returns in a cell with notebook syntax."""

    def __init__(self, ns, show):
        self.user_ns = ns
        self.show = show  # show(data) publishes a MIME bundle as a result

    # -- shell escapes --

    def system(self, cmd):
        """`!cmd`: runs cmd with /bin/sh; its exit status is _exit_code."""
        rc, _ = _run(_shell_argv(_expand(cmd, self.user_ns)))
        self.user_ns["_exit_code"] = rc
        # `!pip install x` is importable at once too, as with %pip.
        importlib.invalidate_caches()
        _add_user_site()

    def getoutput(self, cmd, split=True):
        """`x = !cmd`: the command's output as a list of lines."""
        rc, text = _run(_shell_argv(_expand(cmd, self.user_ns)), capture=True)
        self.user_ns["_exit_code"] = rc
        return OutputLines(text.splitlines()) if split else text

    # -- magics --

    def run_line_magic(self, name, line):
        fn = _LINE_MAGICS.get(name)
        if fn is None:
            raise UsageError("Line magic function `%%%s` not found. cellvm cells support %s; "
                             "shell commands run with `!cmd`." % (name, _names("%", _LINE_MAGICS)))
        where = sys._getframe(1)
        return fn(self, line, (where.f_code.co_filename, where.f_lineno))

    def run_cell_magic(self, name, line, body):
        fn = _CELL_MAGICS.get(name)
        if fn is None:
            raise UsageError("Cell magic `%%%%%s` not found. cellvm cells support %s."
                             % (name, _names("%%", _CELL_MAGICS)))
        where = sys._getframe(1)
        # The body starts on the line after the %%magic line.
        return fn(self, line, body, (where.f_code.co_filename, where.f_lineno + 1))


class OutputLines(list):
    """The lines of a command's output (IPython's SList, in short): .s is
    them joined by spaces, .n by newlines."""

    @property
    def s(self):
        return " ".join(self)

    @property
    def n(self):
        return "\n".join(self)

    l = property(list)  # noqa: E741 - IPython's name


def _names(prefix, table):
    return ", ".join(prefix + n for n in sorted(table))


def _compile_at(src, where, mode):
    """Compiles src as if it stood at line where[1] of the cell where[0]."""
    filename, lineno = where
    try:
        tree = compile(src, filename, mode, ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as e:
        if e.lineno is not None:
            e.lineno += lineno - 1
        if getattr(e, "end_lineno", None) is not None:
            e.end_lineno += lineno - 1
        raise
    ast.increment_lineno(tree, lineno - 1)
    return tree


def _timed_code(src, where):
    """The code objects for src: the statements, and the last expression
    if src ends with one (its value is the magic's value)."""
    tree = _compile_at(src, where, "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    body = compile(tree, where[0], "exec", dont_inherit=True)
    expr = compile(last, where[0], "eval", dont_inherit=True) if last else None
    return body, expr


def _format_seconds(s):
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if s >= scale or unit == "ns":
            return "%.3g %s" % (s / scale, unit)


def _time(shell, src, where):
    body, expr = _timed_code(src, where)
    ns = shell.user_ns
    wall, cpu = time.perf_counter(), os.times()
    value = None
    try:
        exec(body, ns)
        if expr is not None:
            value = eval(expr, ns)
    finally:
        end_cpu, end_wall = os.times(), time.perf_counter()
        user, system = end_cpu.user - cpu.user, end_cpu.system - cpu.system
        print("CPU times: user %s, sys: %s, total: %s\nWall time: %s" % (
            _format_seconds(user), _format_seconds(system),
            _format_seconds(user + system), _format_seconds(end_wall - wall)))
    return value


def _timeit(shell, src, where, setup="pass"):
    import statistics
    import timeit
    opts, src = _timeit_options(src)
    _compile_at(src, where, "exec")  # a syntax error points at the user's line
    timer = timeit.Timer(src, setup, globals=shell.user_ns)
    number = opts.get("n") or timer.autorange()[0]
    runs = opts.get("r") or 7
    per_loop = [t / number for t in timer.repeat(runs, number)]
    mean = statistics.fmean(per_loop)
    dev = statistics.pstdev(per_loop) if runs > 1 else 0.0
    print("%s ± %s per loop (mean ± std. dev. of %d run%s, %s loop%s each)" % (
        _format_seconds(mean), _format_seconds(dev), runs, "" if runs == 1 else "s",
        "{:,}".format(number), "" if number == 1 else "s"))


def _timeit_options(src):
    """Takes timeit's -n N and -r R off the front of src."""
    opts = {}
    while True:
        m = re.match(r"\s*-([nr])\s*(\d+)\s*", src)
        if not m:
            return opts, src
        opts[m.group(1)] = max(1, int(m.group(2)))
        src = src[m.end():]


def _line_time(shell, line, where):
    return _time(shell, line, where)


def _cell_time(shell, line, body, where):
    return _time(shell, body, where)


def _line_timeit(shell, line, where):
    _timeit(shell, line, where)


def _cell_timeit(shell, line, body, where):
    # The first line is the setup, as in IPython.
    opts, setup = _timeit_options(line)
    prefix = "".join("-%s %d " % kv for kv in opts.items())
    _timeit(shell, prefix + body, where, setup=setup.strip() or "pass")


def _pip(shell, line, where):
    """Runs pip of this interpreter, so what it installs is importable here."""
    if importlib.util.find_spec("pip") is None:
        raise UsageError("%%pip: pip is not installed for %s (python3 -m pip: no module named pip), "
                         "so packages cannot be installed in this sandbox's image." % sys.executable)
    args = _expand(line, shell.user_ns)
    cmd = "%s -m pip %s" % (shlex.quote(sys.executable), args)
    rc, _ = _run(_shell_argv(cmd))
    importlib.invalidate_caches()
    _add_user_site()
    if rc != 0:
        if args.split()[:1] == ["install"] and not _has_network():
            raise PipError("pip install failed (exit status %d): this sandbox has no network access, so pip "
                           "cannot reach a package index. A sandbox created with a network policy that allows "
                           "the index can install (for PyPI: pypi.org and files.pythonhosted.org); without one, "
                           "install a wheel file from /workspace (%%pip install /workspace/NAME.whl)." % rc)
        raise subprocess.CalledProcessError(rc, "pip " + args.strip())
    if args.split()[:1] == ["install"]:
        print("Note: what pip installed is importable in this session; no restart needed.")


def _has_network(routes="/proc/net/route"):
    """Whether this process's network namespace has an IPv4 route out of an
    interface other than loopback (a cellvm guest has one only when its
    sandbox has a network policy)."""
    try:
        with open(routes) as f:
            ifaces = [line.split()[0] for line in f.read().splitlines() if line.strip()]
    except OSError:
        return True  # unknown: say nothing about the network
    return any(i not in ("Iface", "lo") for i in ifaces)  # Iface: the header


def _add_user_site():
    """A user site directory that pip created just now joins sys.path, as
    it would have at start-up."""
    import site
    try:
        user_site = site.getusersitepackages()
    except Exception:
        return
    if site.ENABLE_USER_SITE and os.path.isdir(user_site) and user_site not in sys.path:
        site.addsitedir(user_site)


def _cd(shell, line, where):
    target = _expand(line.strip(), shell.user_ns) or os.path.expanduser("~")
    if len(target) >= 2 and target[0] == target[-1] and target[0] in "'\"":
        target = target[1:-1]
    os.chdir(os.path.expanduser(target))
    print(os.getcwd())


def _pwd(shell, line, where):
    return os.getcwd()


def _env(shell, line, where):
    line = line.strip()
    if not line:
        return dict(os.environ)
    m = re.match(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=\s*|\s+)(.*)$", line)
    if m is None:
        if line not in os.environ:
            raise UsageError("%%env: environment variable %s is not set" % line)
        return os.environ[line]
    name, value = m.group(1), _expand(m.group(2), shell.user_ns)
    os.environ[name] = value
    print("env: %s=%s" % (name, value))


def _system(shell, line, where):
    return shell.getoutput(line)


def _matplotlib(shell, line, where):
    """Figures always come back as PNG results; inline is all there is."""
    backend = line.strip().split()[0] if line.strip() else "inline"
    if backend not in ("inline", "agg", "Agg"):
        print("cellvm: figures are shown as PNG images; the %r backend is not available, "
              "inline is used." % backend, file=sys.stderr)


def _script(program):
    def cell(shell, line, body, where):
        args = shlex.split(line)
        argv = [program] + args if program else args
        if not argv:
            raise UsageError("%%script needs a program, e.g. %%script bash")
        rc, _ = _run(argv, stdin=body)
        if rc != 0:
            raise subprocess.CalledProcessError(rc, " ".join(argv))
    return cell


def _writefile(shell, line, body, where):
    args = shlex.split(line)
    append = "-a" in args or "--append" in args
    names = [a for a in args if a not in ("-a", "--append")]
    if len(names) != 1:
        raise UsageError("%%writefile takes one file name (and -a to append)")
    path = os.path.expanduser(names[0])
    existed = os.path.exists(path)
    with open(path, "a" if append else "w", encoding="utf-8") as f:
        f.write(body)
    print("%s %s" % ("Appending to" if append else ("Overwriting" if existed else "Writing"), names[0]))


def _cell_html(mime):
    def cell(shell, line, body, where):
        shell.show({mime: body, "text/plain": body})
    return cell


_LINE_MAGICS = {
    "cd": _cd,
    "env": _env,
    "matplotlib": _matplotlib,
    "pip": _pip,
    "pwd": _pwd,
    "sx": _system,
    "system": _system,
    "time": _line_time,
    "timeit": _line_timeit,
}

_CELL_MAGICS = {
    "bash": _script("bash"),
    "html": _cell_html("text/html"),
    "markdown": _cell_html("text/markdown"),
    "script": _script(None),
    "sh": _script("sh"),
    "time": _cell_time,
    "timeit": _cell_timeit,
    "writefile": _writefile,
}
