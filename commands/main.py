"""The streamctl command line: builds the typer app and is the one exit point.

Only the standard library and typer are imported here; each subcommand module
imports the core lazily, and tabulate, watchfiles and pyspark are imported
only inside the code that uses them.
"""

from __future__ import annotations

# First, before typer and the rest are imported: a SIGINT or SIGTERM while streamctl is still
# starting ends it quietly (exit 130/143) instead of a KeyboardInterrupt traceback. Only for the
# `streamctl` script; `python -m streamctl` installs it in __main__, and importing this module
# elsewhere (tests, in-process callers) leaves the process's signal handling alone.
import os
import sys

if os.path.basename(sys.argv[0] if sys.argv else "") == "streamctl":
    from streamctl import startsignals

    startsignals.install()

import importlib  # noqa: E402

import typer  # noqa: E402

from streamctl import __version__

# Order is the order `streamctl --help` lists them in.
COMMANDS = ["produce", "capture", "consume", "tail", "stat", "check", "compact", "replay", "window", "join"]

HELP = """\
A log-based message broker and stream processor that lives in a directory and speaks Unix pipes.

A log is a folder of JSON-lines segment files that cat, grep and jq can read;
every command reads and writes JSON lines on stdin/stdout so they chain with |.
"""

EPILOG = """\
\b
Examples:
  seq 3 | streamctl produce orders              # three records, values 1 2 3
  streamctl consume orders --group billing      # everything billing has not read
  streamctl stat orders                         # partitions, offsets, group lag

Exit codes: 0 ok, 1 failure, 2 usage, 3 threshold (stat --fail-lag), 65 bad input,
130 interrupted, 141 the reader closed the pipe. See `man streamctl`.
"""


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"streamctl {__version__}\n")
        raise typer.Exit()


def build_app() -> typer.Typer:
    app = typer.Typer(
        name="streamctl",
        help=HELP,
        epilog=EPILOG,
        rich_markup_mode=None,
        pretty_exceptions_enable=False,
        no_args_is_help=True,
        add_completion=True,
        context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    )

    @app.callback()
    def _root(
        version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                     help="Print the version and exit."),
    ) -> None:
        pass

    for name in COMMANDS:
        importlib.import_module(f"streamctl.commands.{name}").register(app)
    return app


def _print_error(msg: str) -> None:
    try:
        sys.stderr.write(f"streamctl: {msg}\n")
        sys.stderr.flush()
    except OSError:
        pass


def main(argv: list[str] | None = None) -> int:
    # typer (0.26 on) carries its own copy of click, whose exceptions all derive from the public
    # typer.TyperException: usage errors have exit_code 2 and a ctx, others their own exit code.
    from typer import Abort, Exit, TyperException
    from typer.main import get_command

    from streamctl import startsignals
    from streamctl.errors import ExitCode, StreamctlError

    cmd = get_command(build_app())
    startsignals.running()
    try:
        rv = cmd.main(args=argv, prog_name="streamctl", standalone_mode=False)
        code = rv if isinstance(rv, int) else 0
    except StreamctlError as e:
        if e.exit_code != ExitCode.PIPE:
            _print_error(str(e))
        code = int(e.exit_code)
    except Exit as e:
        code = e.exit_code
    except Abort:
        _print_error("interrupted")
        code = ExitCode.INTERRUPTED
    except TyperException as e:
        ctx = getattr(e, "ctx", None)
        if type(e).__name__ == "NoArgsIsHelpError":  # a command given no arguments: its help
            sys.stdout.write(ctx.get_help() + "\n" if ctx is not None else "")
            code = 0 if argv == [] or not sys.argv[1:] else ExitCode.USAGE
        elif e.exit_code == ExitCode.USAGE:
            hint = f"\nTry '{ctx.command_path} --help' for help." if ctx is not None else ""
            _print_error(f"{e.format_message()}{hint}")
            code = ExitCode.USAGE
        else:
            _print_error(e.format_message())
            code = e.exit_code
    except KeyboardInterrupt:
        _print_error("interrupted")
        code = ExitCode.INTERRUPTED
    except BrokenPipeError:
        code = ExitCode.PIPE
    except OSError as e:
        # the safety net: an OS error the core did not anticipate is still a message, not a traceback
        where = f"{e.filename}: " if e.filename else ""
        why = "a symlink where a file was expected (refusing to follow it)" if e.errno == 40 else (e.strerror or str(e))
        _print_error(f"{where}{why}")
        code = ExitCode.FAILURE
    startsignals.finishing()
    try:
        sys.stdout.flush()
    except (BrokenPipeError, OSError):
        # the reader is gone; keep the interpreter's final flush from complaining
        try:
            fd = os.open(os.devnull, os.O_WRONLY)
            os.dup2(fd, sys.stdout.fileno())
        except OSError:
            pass
        if code == 0:
            code = ExitCode.PIPE
    return code


def _fill_closed_std_fds() -> None:
    """Put /dev/null on a standard descriptor the caller closed (`>&-`), before any file is opened.

    Otherwise the first file streamctl opens (a segment, a group file) would get that number and
    the output meant for stdout would be written into it. stdout and stdin get it opened the wrong
    way round, so using them fails with EBADF (a clear error, as `cat >&-` gives), while stderr
    gets it for writing: diagnostics nobody reads are dropped, and the exit code still tells.
    """
    for fd, flags in ((0, os.O_WRONLY), (1, os.O_RDONLY), (2, os.O_WRONLY)):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        got = os.open(os.devnull, flags)
        if got != fd:  # a lower descriptor was closed too and took this one: it is filled next round
            os.dup2(got, fd)
            os.close(got)
        stream = os.fdopen(fd, "w" if fd else "r", encoding="utf-8", closefd=False)
        setattr(sys, ("stdin", "stdout", "stderr")[fd], stream)


def run() -> None:
    _fill_closed_std_fds()
    sys.exit(main())
