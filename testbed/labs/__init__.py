"""The course labs' room: what a lab is and starting one (definition), a student's runs as grading reads
them (studentruns), grading them (grading) on their evidence (evidence, labels), their prose (statements,
answerfile), their folder read as untrusted (intake) and their runs run again (reruns), each student's
own seeds (students), the bands made from reference runs (referencebands), what ``testbed lab`` does
(lab), handing in (submission) and the Gradescope autograder's zip (autograder). The labs' folders are
``labs/<name>/``.
"""
