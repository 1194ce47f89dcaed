"""Echoes lines back, except: a line containing "crash" makes it exit with status 3 without
answering, "die" makes it kill itself with SIGKILL, and with `--ignore-eof` it keeps running
(and ignores SIGTERM) after its stdin closes."""

import os
import signal
import sys
import time

ignore_eof = "--ignore-eof" in sys.argv
stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
for line in iter(stdin.readline, b""):
    if b"crash" in line:
        sys.stdout.flush()
        os._exit(3)
    if b"die" in line:
        os.kill(os.getpid(), signal.SIGKILL)
    if b"hold" not in line:  # a request it holds is never answered
        stdout.write(line.replace(b'"method"', b'"echoed"'))
        stdout.flush()
if ignore_eof:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(60)  # the behaviour under test: a server that outstays EOF and SIGTERM
