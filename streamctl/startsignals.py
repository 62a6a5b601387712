"""SIGINT and SIGTERM while streamctl starts: end quietly, exit 130 or 143, never a traceback.

Python turns SIGINT into a KeyboardInterrupt wherever the interpreter happens to be, and
while modules are still being imported that is outside any handler of ours: a shell script
or a test harness that interrupts a command it has just started got a traceback. So the
entry points (`python -m streamctl` and the `streamctl` script) install `install()` before
they import anything else: until the command itself runs, either signal ends the process at
once with the shell's code for it (128 + the signal), as a signal's default action would,
and nothing has been written yet that needs finishing.

Once the command runs (`running()`), SIGINT raises KeyboardInterrupt again (but inside an
import it still ends the process at once), which the CLI's main turns into "interrupted" and
exit 130, and SIGTERM keeps ending the process with 143
(a command that has a clean stop installs its own handlers: streamctl.stopflag). After the
command (`finishing()`), both end it quietly again while the interpreter shuts down.

Only `os` and `_signal` are imported here, both loaded by the interpreter before any code of
ours runs: the `signal` module's Python half imports `enum` (milliseconds in which a SIGINT
would again be a traceback).
"""

import os

TYPE_CHECKING = False  # not typing's: importing typing takes milliseconds (mypy knows the name)
if TYPE_CHECKING:  # typeshed describes the C half as `signal`; `_signal` has the same functions
    import signal as _signal
else:
    import _signal

_installed = False


def _quit(signum: int, frame: object) -> None:
    os._exit(128 + signum)


def _interrupt(signum: int, frame: object) -> None:
    """SIGINT while the command runs: KeyboardInterrupt (main says "interrupted", exit 130),
    except inside an import (a module's body or importlib's own code), which ends the process
    like start-up does. Commands import what
    they need as they start, and an exception raised in a module that a C extension's init
    is importing can crash the process: orjson's init, interrupted while it imports json,
    segfaults (strace -e inject=openat:signal=SIGINT at the open of json/encoder.py)."""
    f = frame
    while f is not None:
        code = f.f_code  # type: ignore[attr-defined]
        if code.co_name == "<module>" and f.f_globals.get("__name__") != "__main__":  # type: ignore[attr-defined]
            os._exit(128 + signum)
        # importlib's own frames count as an import too: a module lock's weakref callback runs
        # with no module frame above it, and an exception raised there is only printed ("Exception
        # ignored in ... _get_module_lock ... cb") while the command carries on
        if code.co_filename.startswith("<frozen importlib"):
            os._exit(128 + signum)
        f = f.f_back  # type: ignore[attr-defined]
    raise KeyboardInterrupt


def install() -> None:
    global _installed
    _installed = True
    _signal.signal(_signal.SIGINT, _quit)
    _signal.signal(_signal.SIGTERM, _quit)


def running() -> None:
    """The command starts: SIGINT is a KeyboardInterrupt again (main reports it, exit 130)."""
    if _installed and _signal.getsignal(_signal.SIGINT) is _quit:
        _signal.signal(_signal.SIGINT, _interrupt)


def finishing() -> None:
    """The command is over: a late signal ends the process quietly with its code."""
    if _installed:
        _signal.signal(_signal.SIGINT, _quit)
        _signal.signal(_signal.SIGTERM, _quit)
