"""What the proxy keeps of a session: the session log's writer, the credentials hidden in its
header, the conversation the host appends, and retention at start."""
