"""What to run: the plan the runner executes, the connections of a run, estimates of its wall time, what a
resumed session keeps, and how a plan's progress reads on a console."""
