"""Echoes lines back; ignores SIGTERM and keeps running for a minute after its stdin closes.

Writes its pid to the file named by its first argument: the tests start it under `sh -c`,
a grandchild of the proxy, and check that it does not outlive the session."""

import os
import signal
import sys
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(sys.argv[1], "w") as f:
    f.write(str(os.getpid()))
stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
for line in iter(stdin.readline, b""):
    stdout.write(line)
    stdout.flush()
time.sleep(60)  # the behaviour under test: it outlives its stdin (and ignores SIGTERM)
