"""Serving a flow: loaded beside the session, shown what happens, it makes the lookups it expects
after each call (asking its arbiter, if it has one), never what the guard refuses, and appends
their block to the server's answer."""
