"""streamctl: a log-based message broker and stream processor in a directory.

The core (this package) knows nothing of the command line: it raises
StreamctlError subclasses and streams records; `streamctl.commands` is the CLI
and `streamctl.formats` the codecs.
"""

__version__ = "0.1.0"
