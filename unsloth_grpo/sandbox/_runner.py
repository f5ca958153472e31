"""The child side of the sandbox: built-in modules only (``json`` would cost ~90 ms of imports per job), run as ``python -I -S -B -c``.

The parent (:mod:`unsloth_grpo.sandbox`) never imports this module. It reads the source and
starts a fresh interpreter with it, so that nothing of the trainer (its modules, memory,
open files) exists in the process that runs untrusted code. Every name the runner needs
after the untrusted code starts is bound locally before it starts: the untrusted code can
patch modules, ``builtins`` and ``__main__``, but not a local variable of a frame it cannot
reach, and the audit hook below refuses every way of reaching a frame.

Protocol: the job arrives as JSON on stdin (read, then closed). Results go to the inherited
write-only file descriptor ``job["result_fd"]`` as lines ``<nonce> <kind> <repr of plain data>``. The nonce
comes with the job and only ever lives in locals of :func:`_main` and the hook's closure, so
a line written by the untrusted code cannot be taken for a verdict.
"""


def _main():  # noqa: C901  (one function on purpose: its locals are what the untrusted code cannot reach)
    import _signal
    import builtins
    import marshal
    import os
    import resource
    import sys

    import _stat
    import ast
    import collections
    import enum
    import types  # noqa: F401  (imported now: at import it reads a traceback's frame, which the hook refuses)
    import typing

    # Only C functions and this function's closures from here on: a Python function of a module
    # (os.path.realpath, os.fsdecode) looks its helpers up in that module, which the job can patch.
    write, getframe, get_ident = os.write, sys._getframe, __import__("_thread").get_ident
    lstat, stat_, readlink, getcwd = os.lstat, os.stat, os.readlink, os.getcwd
    is_link, is_dir, monotonic = _stat.S_ISLNK, _stat.S_ISDIR, __import__("time").monotonic
    modules = sys.modules
    parse, walk, Import, ImportFrom = ast.parse, ast.walk, ast.Import, ast.ImportFrom
    # the standard-library code that may look at its caller's frame: it reads the module name and
    # keeps nothing (TypeVar and typing.NamedTuple, collections.namedtuple, the Enum functional API)
    frame_ok = frozenset((typing._caller.__code__, collections.namedtuple.__code__,
                          enum.EnumType.__dict__["_create_"].__code__))

    job = marshal.loads(sys.stdin.buffer.read())
    os.close(0)
    nonce, out_fd, limits = job["nonce"], job["result_fd"], job["limits"]
    # Everything the untrusted code calls from here on; the values of these names never change.
    tag = (nonce + " ").encode()

    def emit(kind, payload):
        try:
            write(out_fd, tag + kind.encode() + b" " + repr(payload).encode() + b"\n")
        except OSError:  # the result file hit its size limit: the verdicts already written stand
            pass

    # ---- kernel limits (this process only; set before any job code runs)
    _signal.signal(_signal.SIGXFSZ, _signal.SIG_IGN)  # a write past the file-size limit fails instead of killing
    wanted = {
        "RLIMIT_AS": limits["memory_bytes"],
        "RLIMIT_CPU": limits["cpu_seconds"],
        "RLIMIT_FSIZE": limits["output_bytes"],
        "RLIMIT_NOFILE": limits["open_files"],
        "RLIMIT_NPROC": 0,
        "RLIMIT_CORE": 0,
    }
    for name, value in wanted.items():
        # The CPU limit's hard value sits one second above the soft one: at the soft limit the
        # kernel sends SIGXCPU (read as a timeout); with both equal it sends SIGKILL, which cannot
        # be told from the out-of-memory killer. A job that survives SIGXCPU dies a second later.
        hard = value + 1 if name == "RLIMIT_CPU" else value
        resource.setrlimit(getattr(resource, name), (value, hard))
    try:
        netns = os.readlink("/proc/self/ns/net")
    except OSError:
        netns = None
    emit("facts", {
        "uid": os.getuid(),
        "netns": netns,
        "limits": {name: resource.getrlimit(getattr(resource, name))[0] for name in wanted},
    })
    # signal handlers receive the running frame: take the module away before the job runs
    # (and select, which the fork server used).
    for name in ("signal", "_signal", "select"):
        modules.pop(name, None)

    # ---- the audit hook: what Python-level code may not do
    root = os.path.realpath(getcwd())
    read_roots = tuple(os.path.realpath(p) for p in sys.path if p) + (root,)
    denied_modules = frozenset(job["denied_modules"])
    process_events = frozenset((
        "os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.kill",
        "os.killpg", "os.startfile", "subprocess.Popen", "signal.pthread_kill", "pty.spawn"))
    path_events = frozenset((
        "os.remove", "os.unlink", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.truncate",
        "os.utime", "os.chdir", "os.rename", "os.replace", "os.link", "os.symlink", "os.chflags",
        "os.lchflags", "os.lchmod", "os.lchown", "os.mkfifo", "os.mknod", "shutil.rmtree",
        "os.setxattr", "os.removexattr"))
    dir_fd_args = {"os.remove": (1,), "os.rmdir": (1,), "os.mkdir": (2,), "os.chmod": (2,), "os.chown": (3,),
                   "os.rename": (2, 3), "os.replace": (2, 3), "os.link": (2, 3), "os.utime": (3,),
                   "os.mkfifo": (2,), "os.mknod": (3,)}
    frame_attrs = frozenset(("tb_frame", "gi_frame", "cr_frame", "ag_frame"))
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    busy, created, seen = set(), [0], set()
    max_files = limits["max_files"]

    def resolve(path):
        """``path`` made absolute with every symlink followed (as the kernel will), or None."""
        if type(path) is bytes:
            path = path.decode("utf-8", "surrogateescape")
        if type(path) is not str or "\x00" in path:
            return None
        if not path.startswith("/"):
            path = getcwd() + "/" + path
        done, todo, hops = [], path.split("/")[::-1], 0
        while todo:
            part = todo.pop()
            if part in ("", "."):
                continue
            if part == "..":
                if done:
                    done.pop()
                continue
            here = "/" + "/".join(done + [part])
            try:
                mode = lstat(here).st_mode
            except OSError:
                done.append(part)
                continue
            if is_link(mode):
                hops += 1
                if hops > 40:
                    return None
                target = readlink(here)
                if target.startswith("/"):
                    done = []
                todo.extend(target.split("/")[::-1])
            else:
                done.append(part)
        return "/" + "/".join(done)

    def inside(path, roots):
        full = resolve(path)
        return full is not None and any(full == r or full.startswith(r + "/") for r in roots)

    def a_dir(path):
        full = resolve(path)
        try:
            return full is not None and is_dir(stat_(full).st_mode)
        except OSError:
            return False

    def shown(x):
        return x if type(x) is str else x.decode("utf-8", "replace") if type(x) is bytes else f"<{type(x).__name__}>"

    def deny(event, what):
        if event not in seen:
            seen.add(event)
            emit("blocked", {"event": event, "what": shown(what)[:200]})
        raise PermissionError(f"sandbox: {event} is not allowed ({shown(what)[:100]})")

    def hook(event, args):
        me = get_ident()
        if me in busy:
            return
        busy.add(me)
        try:
            check(event, args)
        finally:
            busy.discard(me)

    def check(event, args):
        if event == "open":
            path, mode, flags = args
            if type(path) is int or path is None:
                return
            if type(path) not in (str, bytes):  # a path-like object could answer differently when asked again
                deny(event, "a path given as an object (pass a str)")
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool((flags or 0) & write_flags)
            if writing:
                if not inside(path, (root,)):
                    deny(event, f"writing {path} outside the working directory")
                created[0] += 1
                if created[0] > max_files:
                    deny(event, f"more than {max_files} files opened for writing")
            elif not inside(path, read_roots) and resolve(path) != "/dev/null":
                deny(event, f"reading {shown(path)} outside the working directory and the standard library")
            elif a_dir(path) and not inside(path, (root,)):
                # a directory descriptor would let os.open(name, dir_fd=fd) write where the check cannot see
                deny(event, f"opening the directory {shown(path)}")
        elif event in path_events:
            if event == "os.symlink":
                deny(event, "symbolic links")
            for p in args[:2] if event in ("os.rename", "os.replace", "os.link") else args[:1]:
                if type(p) is int:
                    if event != "os.chdir":
                        deny(event, "a file descriptor")
                elif not inside(p, (root,)):
                    deny(event, p)
            # a path relative to a directory descriptor would be checked against the wrong directory
            if any(args[i] not in (None, -100) for i in dir_fd_args.get(event, ()) if i < len(args)):
                deny(event, "a path relative to a directory descriptor")
        elif event in ("os.listdir", "os.scandir"):
            if args and args[0] is not None and type(args[0]) is not int and not inside(args[0], read_roots):
                deny(event, args[0])
        elif event == "import":
            name = args[0]
            if name in denied_modules or name.partition(".")[0] in denied_modules:
                deny(event, name)
        elif event == "object.__getattr__" and args[1] in frame_attrs or event == "sys._getframe":
            if getframe(2).f_code not in frame_ok:
                deny(event, "frame introspection")
        elif event in process_events or event.startswith(("socket.", "ctypes.", "os.exec", "os.spawn",
                                                           "os.posix_spawn", "winreg.", "_winapi.")):
            deny(event, "processes, signals, sockets and foreign functions are not available")
        elif event in ("sys._current_frames", "sys.settrace", "sys.setprofile", "sys.addaudithook",
                       "gc.get_objects", "gc.get_referrers", "gc.get_referents", "resource.setrlimit",
                       "resource.prlimit", "sqlite3.connect", "sys.remote_exec", "os.add_dll_directory"):
            deny(event, "not available in the sandbox")

    # ---- the verdict: a value the tests compare must be plain data, so __eq__ cannot be faked
    plain_scalars = (bool, int, float, complex, str, bytes, type(None))
    containers = (list, tuple, set, frozenset)

    def plain(value):
        stack, seen_items = [value], 0
        while stack:
            v = stack.pop()
            seen_items += 1
            if seen_items > 1_000_000:
                raise TypeError("the returned value is too large to check")
            t = type(v)
            if t in plain_scalars:
                continue
            if t in containers:
                stack.extend(v)
            elif t is dict:
                stack.extend(v.keys())
                stack.extend(v.values())
            else:
                raise TypeError(f"the function returned a {t.__name__!s}; tests accept only plain data "
                                "(numbers, strings, bytes, None and lists/tuples/sets/dicts of them)")
        return value

    def guarded(fn):
        def candidate(*a, **k):
            return plain(fn(*a, **k))
        return candidate

    def error_name(exc):
        try:
            return type.__dict__["__name__"].__get__(type(exc))
        except BaseException:
            return "Exception"

    def error_text(exc):
        # Runs the code's own __str__ at worst, still inside the sandbox.
        try:
            return BaseException.__str__(exc)[:300]
        except BaseException:
            return ""

    snapshot = {}

    def tampered():
        for name, (module, attrs) in snapshot.items():
            if modules.get(name) is not module:
                return f"sys.modules[{name!r}] was replaced"
            current = module.__dict__
            for key, value in attrs.items():
                if current.get(key, current) is not value:
                    return f"{name}.{key} was changed"
        return None

    # ---- run
    clean_builtins = dict(builtins.__dict__)
    test_ns = {"__builtins__": clean_builtins, "__name__": "__sandbox_tests__"}
    user_ns = {"__builtins__": builtins, "__name__": "__main__"}
    code_kwargs = dict(dont_inherit=True)
    sys.addaudithook(hook)
    started = monotonic()
    errors = []
    try:
        # The tests get their own copy of the context (the helpers a HumanEval test calls, such as
        # poly for find_zero) and the harness's definitions, made before the code runs.
        for part, label in ((job["context"], "<context>"), (job["setup"], "<tests>")):
            if part:
                exec(compile(part, label, "exec", **code_kwargs), test_ns)
        # Modules the tests import, even inside a function, are loaded now, so that the code cannot
        # plant a fake one in sys.modules for them (the snapshot below catches a replaced one).
        for part in (job["setup"], *job["tests"]):
            try:
                tree = parse(part)
            except (SyntaxError, ValueError):
                continue
            for node in walk(tree):
                if type(node) is Import:
                    names = [alias.name for alias in node.names]
                elif type(node) is ImportFrom and node.module and not node.level:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    try:
                        __import__(name)
                    except Exception:
                        pass
        for name, module in list(modules.items()):
            snapshot[name] = (module, dict(getattr(module, "__dict__", {})))
        solution_error = None
        try:
            if job["context"]:
                exec(compile(job["context"], "<context>", "exec", **code_kwargs), user_ns)
            exec(compile(job["solution"], "<solution>", "exec", **code_kwargs), user_ns)
        except BaseException as exc:  # SystemExit and KeyboardInterrupt included: the tests still run
            solution_error = error_name(exc)
            if solution_error == "MemoryError":
                errors.append("MemoryError")
        entry = job["entry_point"]
        fn = user_ns.get(entry) if entry else None
        if entry:
            for name in {entry, job["candidate_name"] or entry}:
                test_ns[name] = guarded(fn) if callable(fn) else fn
        emit("defined", {"error": solution_error, "callable": callable(fn)})
        for i, test in enumerate(job["tests"]):
            try:
                exec(compile(test, f"<test {i}>", "exec", **code_kwargs), test_ns)
                why = tampered()
                if why is None:
                    emit("ok", i)
                else:
                    emit("fail", [i, "Tampering", why])
            except BaseException as exc:
                name = error_name(exc)
                if name == "MemoryError":
                    errors.append(name)
                emit("fail", [i, name, error_text(exc)])
    except BaseException as exc:  # the harness itself failed (a bad setup, or memory)
        emit("harness_error", error_name(exc))
    emit("done", {"seconds": monotonic() - started, "errors": errors})


def _serve():
    """The fork server: a clean interpreter that forks one child per job and never runs job code.

    Requests arrive on stdin as lines ``id<TAB>timeout<TAB>workdir<TAB>iodir``; the child makes
    itself a session leader, moves into ``workdir``, takes ``iodir``'s job/stdout/stderr/results
    files as descriptors 0-3, closes everything else (this server's pipes included) and runs
    :func:`_main`. The server kills a child (its own process group) at its deadline, kills
    anything left in that group once it exits, reaps it and answers
    ``id<TAB>returncode<TAB>seconds<TAB>killed``. It stops when stdin closes (the trainer went
    away), killing its children first.
    """
    import os
    import select
    import sys
    import time

    # what every job imports before its code runs, loaded once here so that a fork finds it ready
    for name in ("_stat", "ast", "collections", "enum", "marshal", "resource", "types", "typing"):
        __import__(name)

    out, err = sys.stdout, sys.stderr  # flushed at the end: os._exit does not

    def child(workdir, iodir):
        os.setsid()
        os.chdir(workdir)
        os.environ.update({"HOME": workdir, "TMPDIR": workdir})
        for fd, name, flags in ((0, "job", os.O_RDONLY), (1, "stdout", os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                (2, "stderr", os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                (3, "results", os.O_WRONLY | os.O_APPEND)):
            opened = os.open(os.path.join(iodir, name), flags, 0o600)
            if opened != fd:
                os.dup2(opened, fd)
                os.close(opened)
        os.closerange(4, 1 << 16)
        try:
            _main()
        finally:
            for stream in (out, err):
                try:
                    stream.flush()
                except BaseException:
                    pass

    children = {}
    pending = b""
    os.write(1, b"ready\n")
    while True:
        ready, _, _ = select.select([0], [], [], 0.002 if children else None)
        if ready:
            chunk = os.read(0, 1 << 16)
            if not chunk:
                for pid in children:
                    try:
                        os.killpg(pid, 9)
                    except OSError:
                        pass
                return
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                ident, timeout, workdir, iodir = line.decode().split("\t")
                start = time.monotonic()
                pid = os.fork()
                if pid == 0:
                    code = 70
                    try:
                        child(workdir, iodir)
                        code = 0
                    finally:
                        os._exit(code)
                children[pid] = [ident, start + float(timeout), start, False]
        now = time.monotonic()
        for pid, entry in children.items():
            if not entry[3] and now > entry[1]:
                try:
                    os.killpg(pid, 9)
                except OSError:
                    pass
                entry[3] = True
        while children:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            if info is None or info.si_pid == 0:
                break
            pid = info.si_pid
            try:  # the group is still ours until the child is reaped: end whatever it left behind
                os.killpg(pid, 9)
            except OSError:
                pass
            _, status = os.waitpid(pid, 0)
            ident, _, start, killed = children.pop(pid)
            seconds = time.monotonic() - start
            os.write(1, f"{ident}\t{os.waitstatus_to_exitcode(status)}\t{seconds:.4f}\t{int(killed)}\n".encode())


if __name__ == "__sandbox_serve__":
    _serve()
else:
    _main()
