"""What to run: the connections of a run, estimates of its wall time, what a resumed session keeps."""
