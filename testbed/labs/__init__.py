"""The course labs' room: what a lab is and starting one (kit), a student's runs as grading reads them
(runs), grading them (grading), the bands made from reference runs (bands), what ``testbed lab`` does
(commands) and the Gradescope autograder's zip (autograder). The labs' folders are ``labs/<name>/``.
"""
