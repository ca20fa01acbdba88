"""Reports people read, in three rooms (each imports only those after it; .importlinter says so): ``live``
(the live page, its feed and server, runs analysed ahead of the report while a session runs), ``pages`` (a
run's and a session's report.html and summary.md, their tables, the claims' verdicts, JUnit), ``cache``
(what a report keeps between runs: analyses and figures, signed). docs/layout.md names each module."""
