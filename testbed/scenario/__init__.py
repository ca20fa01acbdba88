"""The experiment files: the schema, reading YAML with the line of every value, sweeps and suites,
and the registry of congestion-control algorithms. Pure: no kernel, no processes.

A scenario is one experiment; its file is ``scenarios/<name>.yaml`` and the file name is the
scenario's name. The format is YAML rather than TOML because students annotate their files with
comments, lists and maps read naturally, and PyYAML's composed nodes carry line numbers, so every
error can name its line (TOML's parser gives no positions). Files are composed with PyYAML's
SafeLoader: data only, never ``exec``/``eval``; and bounded first (``MAX_FILE_BYTES``, ``MAX_DEPTH``
and the rest, checked on the raw tokens), so that no file ends in a RecursionError or minutes of work.

Pipeline, in the order :func:`load_scenario` runs it::

    text --compose--> nodes (+ line of every path) --profile deep-merge--> raw dict
         --find sweep axes--> cartesian product --validate each point--> Points --x seeds--> RunSpecs

Sweeps: where the schema expects one value and the file gives a list, that list is a sweep axis.
Axes are found by walking the raw data alongside the models' field annotations (nested models,
``list[Model]`` items, and the topology union by its ``name``). Fields whose type is a list
(``flows``, ``seeds``, ``periods``) are values, never axes. Every point has ``params`` (short axis
name -> value; the short name is the leaf key, or the dotted path such as ``flows[1].cc`` when two
axes share a leaf key) and a filesystem-safe ``point_id`` such as ``cc=westwood,loss_pct=0``
(``default`` when the file has no axes; list indices appear as ``flows.1.cc`` so that a shell never
globs the id).

Errors: every problem of every point is collected, deduplicated and raised together as one
:class:`ScenarioError`, written from pydantic's error ``type``/``ctx`` with the valid range or
options and the closest valid name. Cross-field checks raise a ``scenario_check`` error that carries
the exact sub-location of each problem, so those name their line too.

The modules, in the order of their imports (each imports only from those above it)::

    algorithms.py  the congestion-control algorithms a flow may name
    errors.py      ScenarioError, Problem, and how data paths and values read in a message
    yamlfile.py    reading a file within its bounds, composing the YAML, the line of every path
    schema.py      the pydantic models: Scenario, Flow (each topology's models are in topologies/)
    walk.py        walking the raw data alongside the models' annotations and unions
    messages.py    pydantic's validation errors as messages, each with its line
    profiles.py    a profile deep-merged over the base; time_scale
    sweep.py       sweep axes, the bounds on a sweep's size, point ids
    points.py      the results of loading: ScenarioFile, Point, RunSpec
    load.py        the entry points: load_scenario, load_scenario_text, scenario_from_dict, find_scenario
    suite.py       suites: chosen points of several scenario files, run together
"""
