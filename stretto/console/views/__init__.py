"""What the console's pages show, computed from the data directory: the catalogue, a session's
timeline, the overview, a flow with its replay figures, and its drift computed in the
background."""
