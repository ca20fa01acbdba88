"""What ``--cluster SPEC`` names: N workers on this host, lab hosts from an Ansible inventory, or Slurm jobs.

Three forms, each read into a typed spec before anything starts:

* ``local:N`` — N Dask workers on this machine, each with its own share of the cores (a guest's vCPUs
  are pinned to them: a large KVM host runs N guests side by side);
* an Ansible inventory (``ssh:FILE`` or just ``FILE``) — one worker per host, reached over SSH as
  Ansible reaches it (``ansible_host``, ``ansible_user``, ``ansible_port``, ``ansible_ssh_private_key_file``),
  running the checkout ``playbooks/site.yml`` installed at ``testbed_src`` (default ``/opt/cc-testbed``).
  The inventory is read with ``ansible-inventory --list``, so groups, ranges and ``*_vars`` work as they do
  for the playbook. ``testbed_known_hosts`` names a known_hosts file (default: the user's);
  ``dask_scheduler_host`` the host that runs Dask's scheduler (default: the first worker);
* a Slurm description (``slurm:FILE`` or a YAML file with a top-level ``slurm:``) — one batch job per
  worker, started by dask-jobqueue's ``SLURMCluster`` with its cores and memory reserved.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

#: where site.yml installs the checkout on a lab host (playbooks/inventory/lab.ini.example)
DEFAULT_CHECKOUT = "/opt/cc-testbed"


class ClusterError(Exception):
    """A cluster that cannot be used: the message names the SPEC's part, what would be valid and how to fix it."""


class LocalSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["local"] = "local"
    workers: int = Field(ge=1)


class SSHHost(BaseModel):
    """One inventory host as Ansible would reach it."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str
    address: str
    user: str | None = None
    port: int = 22
    key_file: str | None = None
    known_hosts: str | None = None
    checkout: str = DEFAULT_CHECKOUT

    @property
    def python(self) -> str:
        return f"{self.checkout}/.venv/bin/python"

    def connect_options(self) -> dict:
        """asyncssh.connect's options (SSHCluster passes them on)."""
        options: dict = {"port": self.port}
        if self.user:
            options["username"] = self.user
        if self.key_file:
            options["client_keys"] = [os.path.expanduser(self.key_file)]
        if self.known_hosts:
            options["known_hosts"] = os.path.expanduser(self.known_hosts)
        return options


class SSHSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["ssh"] = "ssh"
    inventory: str
    hosts: list[SSHHost]
    scheduler: SSHHost


class SlurmSpec(BaseModel):
    """The Slurm description file's ``slurm:`` mapping (every key checked: a misspelt one is refused)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["slurm"] = "slurm"
    partition: str | None = None
    account: str | None = None
    #: workers, one batch job each
    jobs: int = Field(default=2, ge=1, strict=True)  # strict: "jobs: yes" is a mistake, not 1 job
    #: cores reserved per job (a guest's vCPUs)
    cores: int = Field(default=2, ge=1, strict=True)
    memory: str = "4GiB"
    walltime: str = "01:00:00"
    #: the checkout on the cluster's nodes (a shared filesystem); default: this one
    checkout: str | None = None
    #: more ``#SBATCH`` lines, e.g. ["--nodelist=node3"]
    extra_directives: list[str] = Field(default_factory=list)


ClusterSpec = LocalSpec | SSHSpec | SlurmSpec


def parse(text: str) -> ClusterSpec:
    """The spec ``--cluster`` names, or :class:`ClusterError` saying which forms exist."""
    if text.startswith("local:"):
        return _local(text.removeprefix("local:"))
    if text.startswith("slurm:"):
        return read_slurm(Path(text.removeprefix("slurm:")))
    if text.startswith("ssh:"):
        return read_inventory(Path(text.removeprefix("ssh:")))
    path = Path(text)
    if not path.is_file():
        raise ClusterError(
            f"--cluster {text!r}: no such file; a cluster is local:N (N workers on this host), an Ansible "
            f"inventory file (ssh:FILE, e.g. playbooks/inventory/lab.ini) or a Slurm description (slurm:FILE, "
            f"docs/cluster.md)"
        )
    if path.suffix in (".yaml", ".yml") and isinstance(data := _yaml(path), dict) and "slurm" in data:
        return read_slurm(path)
    return read_inventory(path)


def _local(count: str) -> LocalSpec:
    if not count.isdigit() or int(count) < 1:
        raise ClusterError(f"--cluster local:{count}: N must be a whole number of workers, 1 or more (e.g. local:2)")
    return LocalSpec(workers=int(count))


def _yaml(path: Path) -> object:
    try:
        return yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ClusterError(f"{path}: cannot read it as YAML: {err}") from None


def read_slurm(path: Path) -> SlurmSpec:
    data = _yaml(path)
    if not isinstance(data, dict) or not isinstance(data.get("slurm"), dict):
        keys = ", ".join(name for name in SlurmSpec.model_fields if name != "kind")
        raise ClusterError(f"{path}: a Slurm description is a YAML mapping under 'slurm:' ({keys})")
    try:
        return SlurmSpec.model_validate(data["slurm"])
    except ValidationError as err:
        problems = "; ".join(f"slurm.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        valid = ", ".join(name for name in SlurmSpec.model_fields if name != "kind")
        raise ClusterError(f"{path}: {problems} (valid keys: {valid})") from None


def read_inventory(path: Path) -> SSHSpec:
    """Every host of an Ansible inventory, with its variables as ``ansible-inventory`` resolves them."""
    if not path.is_file():
        raise ClusterError(f"{path}: no such inventory (copy playbooks/inventory/lab.ini.example and list your hosts)")
    listing = _ansible_inventory(path)
    hostvars = listing.get("_meta", {}).get("hostvars", {})
    names = sorted(_hosts_under(listing, "all"))
    if not names:
        raise ClusterError(
            f"{path}: the inventory lists no host (uncomment or add lines like "
            f"'sender1 ansible_host=192.0.2.10 ansible_user=debian')"
        )
    hosts = [_ssh_host(name, hostvars.get(name, {})) for name in names]
    wanted = next((v["dask_scheduler_host"] for v in hostvars.values() if v.get("dask_scheduler_host")), None)
    scheduler = next((h for h in hosts if h.name == wanted), None) if wanted else hosts[0]
    if scheduler is None:
        raise ClusterError(
            f"{path}: dask_scheduler_host={wanted!r} is not a host of the inventory ({', '.join(names)})"
        )
    return SSHSpec(inventory=str(path), hosts=hosts, scheduler=scheduler)


def _ansible_inventory(path: Path) -> dict:
    try:
        done = subprocess.run(
            ["ansible-inventory", "-i", str(path), "--list"], capture_output=True, text=True, timeout=120
        )
    except FileNotFoundError:
        raise ClusterError("ansible-inventory is missing (it reads the inventory): run 'make setup'") from None
    if done.returncode != 0 or "Unable to parse" in done.stderr:
        raise ClusterError(f"{path}: ansible-inventory cannot read it: {done.stderr.strip()[-400:]}")
    return json.loads(done.stdout)


def _hosts_under(listing: dict, group: str) -> set[str]:
    entry = listing.get(group, {})
    hosts = set(entry.get("hosts", []))
    for child in entry.get("children", []):
        hosts |= _hosts_under(listing, child)
    return hosts


def _ssh_host(name: str, hostvars: dict) -> SSHHost:
    try:
        return SSHHost(
            name=name,
            address=str(hostvars.get("ansible_host", name)),
            user=hostvars.get("ansible_user"),
            port=int(hostvars.get("ansible_port", 22)),
            key_file=hostvars.get("ansible_ssh_private_key_file"),
            known_hosts=hostvars.get("testbed_known_hosts"),
            checkout=hostvars.get("testbed_src", DEFAULT_CHECKOUT),
        )
    except (ValueError, ValidationError) as err:
        raise ClusterError(f"inventory host {name}: {err}") from None


def host_count(text: str | None) -> int:
    """How many workers run at once for a --cluster SPEC (1: none given; a spec that cannot be read yet
    counts 1, and its own error comes when the session starts it)."""
    if not text:
        return 1
    try:
        spec = parse(text)
    except ClusterError:
        return 1
    return {"local": lambda: spec.workers, "ssh": lambda: len(spec.hosts), "slurm": lambda: spec.jobs}[spec.kind]()


def spec_text(spec: ClusterSpec) -> str:
    """One line for the log and ``session.json``."""
    if isinstance(spec, LocalSpec):
        return f"local:{spec.workers} ({spec.workers} workers on this host)"
    if isinstance(spec, SSHSpec):
        return f"{spec.inventory} ({len(spec.hosts)} host(s) over SSH: {', '.join(h.name for h in spec.hosts)})"
    return f"Slurm ({spec.jobs} jobs of {spec.cores} cores, partition {spec.partition or 'default'})"
