"""A kernel's config as this project reads it: what the runs need of it (the fragment's options, each
checked in the final ``.config``), whether a developer's own config is a whole ``.config`` or a fragment,
and the options a patch adds that a build leaves unset (testbed/host/kernelbuild.py builds with them)."""

from __future__ import annotations

import re

from testbed.host.kernelsource import Source

#: a config with at least this many options is a whole .config, not a fragment
FULL_CONFIG_OPTIONS = 200

#: fragment options a tree may lack without harm: DEBUG_INFO_NONE came with 5.18 (before it, the
#: fragment's "DEBUG_INFO is not set" does the same)
OPTIONAL = frozenset({"CONFIG_DEBUG_INFO_NONE"})


def required_options(fragment: str) -> dict[str, str]:
    """The fragment's ``CONFIG_X=value`` lines (comments and :data:`OPTIONAL` skipped)."""
    pairs = (line.split("=", 1) for line in fragment.splitlines() if line.startswith("CONFIG_") and "=" in line)
    return {name: value for name, value in pairs if name not in OPTIONAL}


def missing_options(required: dict[str, str], config: str) -> list[str]:
    """The required options a built ``.config`` does not hold, as ``CONFIG_X=value (it has: ...)``."""
    have = dict(line.split("=", 1) for line in config.splitlines() if line.startswith("CONFIG_") and "=" in line)
    return [
        f"{name}={value} (it has: {have.get(name, 'not set')})"
        for name, value in required.items()
        if have.get(name) != value
    ]


def is_full_config(text: bytes) -> bool:
    """A whole ``.config`` (make's header, or hundreds of options) rather than a fragment of a few."""
    lines = text.decode(errors="replace").splitlines()
    return (
        any("Automatically generated file" in line for line in lines[:5])
        or sum(line.startswith(("CONFIG_", "# CONFIG_")) for line in lines) >= FULL_CONFIG_OPTIONS
    )


def unset_new_options(source: Source, config: str) -> list[str]:
    """The Kconfig options the source's patches add (``+config NAME`` in a Kconfig file) that ``config``
    leaves unset: a patch behind a new default-off option is not built, and its comparison would say so."""
    added = []
    for patch in source.patches:
        current = ""
        for line in patch.text.decode(errors="replace").splitlines():
            if line.startswith("+++ "):
                current = line[4:]
            elif "Kconfig" in current.rsplit("/", 1)[-1] and (match := re.match(r"\+\s*(?:menu)?config\s+(\w+)", line)):
                added.append(f"CONFIG_{match.group(1)}")
    have = {line.split("=", 1)[0] for line in config.splitlines() if line.startswith("CONFIG_") and "=" in line}
    return [option for option in dict.fromkeys(added) if option not in have]
