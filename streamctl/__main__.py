# First of all: a SIGINT or SIGTERM while streamctl is still importing ends it quietly (130/143).
from streamctl import startsignals

startsignals.install()

from streamctl.commands.main import run  # noqa: E402

run()
