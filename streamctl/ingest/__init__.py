"""Getting data into a log from outside: growing files followed like `tail -F` (produce --follow)."""
