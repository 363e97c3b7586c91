"""The process of a `conftest.workshop` command: forked from multiprocessing's forkserver, which imported
`conftest.PRELOAD` (this module among them), it ends as the interpreter ends a `python -m workshop_lib.cli` process:
non-daemon threads joined, atexit handlers run, streams flushed, an uncaught exception's traceback on stderr and exit
code 1."""

import atexit
import functools
import os
import sys
import threading

import cpuinfo

# The CPU's description, read once in the server: DeepSpeed's CPU op builders ask py-cpuinfo twice a run (for the
# compiler flags that name a cached op), and each answer costs a process of its own (~1 s on 2 cores)
cpuinfo.get_cpu_info = functools.cache(cpuinfo.get_cpu_info)
cpuinfo.get_cpu_info()


def main_in_child(argv, cwd, environ, out, err, fault=None):
    """`workshop ARGV` in the caller's environment and folder, stdout and stderr into the files `out` and `err`
    (their file descriptors: C++ and child processes' output too); `fault` = (WHEN, SIGNAL) plants tests/faults.py's
    fault first."""
    os.environ.clear()
    os.environ.update(environ)
    os.chdir(cwd)
    for fd, path in ((1, out), (2, err)):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
    try:
        if fault:
            import faults

            faults.install(*fault)
        from workshop_lib.cli import main

        code = main(argv)
    except SystemExit as e:
        code = e.code
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    if not isinstance(code, int | None):
        print(code, file=sys.stderr)
        code = 1
    threading._shutdown()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)
