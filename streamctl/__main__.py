from streamctl.commands.main import run

run()
