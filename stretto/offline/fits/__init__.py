"""What is fitted on held-out sessions: the served score's calibration, the surprise gate, and the
arbiter."""
