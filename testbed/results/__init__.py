"""One run folder and what is in it: the layout and its one JSON/text reader and atomic writer, the manifest's
model, provenance, the session's lock, the capture reader."""
