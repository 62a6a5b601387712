# First of all: a SIGINT or SIGTERM while streamctl is still importing ends it quietly (130/143).
# The handler is set here, before any import of ours: `_signal` and `os` are loaded by the
# interpreter already, while reading startsignals itself takes milliseconds on a busy machine,
# milliseconds in which a SIGINT would print a traceback.
import os

TYPE_CHECKING = False  # typing's would be an import
if TYPE_CHECKING:  # typeshed describes the C half as `signal`
    import signal as _signal
else:
    import _signal

_signal.signal(_signal.SIGINT, lambda signum, frame: os._exit(128 + signum))
_signal.signal(_signal.SIGTERM, lambda signum, frame: os._exit(128 + signum))

from streamctl import startsignals  # noqa: E402

startsignals.install()

from streamctl.commands.main import run  # noqa: E402

run()
