"""Reading logs as they grow: partition cursors behind tail -f and consume --follow, and waiting for changes."""
