"""Echoes lines back (as "echoed", so a request stays unanswered) until a line contains
"mute": then it closes its stdout and goes on reading its stdin, answering nothing, until
the stdin closes."""

import os
import sys

stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
for line in iter(stdin.readline, b""):
    if b"mute" in line:
        stdout.flush()
        os.close(1)
        break
    stdout.write(line.replace(b'"method"', b'"echoed"'))
    stdout.flush()
for _ in iter(stdin.readline, b""):
    pass
