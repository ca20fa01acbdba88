"""One run folder and what is in it: the layout, provenance, the session's lock, the capture reader."""
