"""Writes every line it reads straight back, byte for byte: the far end of the forwarding tests."""

import sys

stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
for line in iter(stdin.readline, b""):
    stdout.write(line)
    stdout.flush()
