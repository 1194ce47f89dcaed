"""Moving the bytes: the loop between host and server and its non-blocking writes, and the wrapped
server over stdio or Streamable HTTP."""
