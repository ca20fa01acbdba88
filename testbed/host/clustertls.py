"""Mutual TLS for the SSH and Slurm clusters (issue 42): Dask's default TCP has no authentication and
no encryption, and a cluster's tasks run as root on every worker host, so anyone who could reach the
scheduler's port could run anything there.

Each session makes its own credentials (:func:`credentials`: Dask's ``Security.temporary``, a fresh
self-signed key and certificate that is also the only certificate authority the session trusts), so
the scheduler, every worker and the controller's client must present that certificate, and a client or
worker with any other (or none) is refused in the TLS handshake. The controller keeps them in memory.
The remote processes get them as files, never on a command line (which any user of a host can read in
``ps``):

* over SSH, :func:`install_over_ssh` writes ``cert.pem`` and ``key.pem`` through the same SSH
  connection the cluster uses, into a new folder ``/tmp/cc-testbed-tls-<controller pid>-<random>`` made
  with mode 0700 (refused if it exists) with files of mode 0600 on every host, and only their paths go
  to the scheduler and workers (as the Dask configuration they inherit, :func:`file_config`);
  :func:`remove_over_ssh` deletes the folder when the session ends;
* on Slurm, dask-jobqueue writes them (mode 0600) into ``shared_temp_directory``, a folder of mode 0700
  made per session beside the Dask scratch folders (:func:`slurm_folder`), removed when the session ends.

A controller killed by SIGKILL cannot remove them: the next cluster session on the controller's host
(and ``testbed cleanup``) removes the folders there whose controller is gone (:func:`remove_stale`); on
another host they stay, readable by root only, holding the key of a scheduler that no longer runs.

Written here rather than by dask-jobqueue or SSHCluster: ``SSHCluster`` passes a ``Security`` object in
its command line (pickled, key included), and neither tool installs files over SSH.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import tempfile
from pathlib import Path

from testbed.host.clusterspec import SSHHost

#: the files each remote host gets (the certificate is also the authority the session trusts)
CERT, KEY = "cert.pem", "key.pem"
#: a session's credentials folder: PREFIX, the controller's pid, a random part
PREFIX = "cc-testbed-tls-"
TMP = "/tmp"


def credentials():
    """A session's own key and certificate, in memory (module doc)."""
    from distributed.security import Security

    return Security.temporary()


def file_security(directory: str):
    """The ``Security`` of the remote processes: the session's files in ``directory``, TLS required."""
    from distributed.security import Security

    cert, key = f"{directory}/{CERT}", f"{directory}/{KEY}"
    return Security(
        require_encryption=True,
        tls_ca_file=cert,
        tls_client_cert=cert,
        tls_client_key=key,
        tls_scheduler_cert=cert,
        tls_scheduler_key=key,
        tls_worker_cert=cert,
        tls_worker_key=key,
    )


def file_config(directory: str) -> dict:
    """The same as Dask configuration, which an SSH cluster's remote processes inherit (SSHCluster sends its
    options as JSON, where a ``Security`` object cannot go, and the configuration in an environment
    variable): only paths."""
    cert, key = f"{directory}/{CERT}", f"{directory}/{KEY}"
    return {
        "distributed.comm.require-encryption": True,
        "distributed.comm.tls.ca-file": cert,
        **{
            f"distributed.comm.tls.{role}.{kind}": path
            for role in ("scheduler", "worker", "client")
            for kind, path in (("cert", cert), ("key", key))
        },
    }


def _distinct(hosts: list[SSHHost]) -> list[SSHHost]:
    seen, out = set(), []
    for host in hosts:
        key = (host.address, host.port, host.user)
        if key not in seen:
            seen.add(key)
            out.append(host)
    return out


async def _install(host: SSHHost, directory: str, files: dict[str, str]) -> None:
    import asyncssh

    async with asyncssh.connect(host.address, **host.connect_options()) as conn:
        await conn.run(f"umask 077 && mkdir -m 700 {directory}", check=True)
        for name, text in files.items():  # on stdin: never in a command line
            await conn.run(f"umask 077 && cat > {directory}/{name}", input=text, check=True)


async def _remove(host: SSHHost, directory: str) -> None:
    import asyncssh

    async with asyncssh.connect(host.address, **host.connect_options()) as conn:
        await conn.run(f"rm -rf {directory}", check=False)


def install_over_ssh(hosts: list[SSHHost], security) -> str:
    """Write the session's credentials to every host (module doc); returns the folder, the same path on
    each. A host that cannot be reached, or where the folder exists, raises."""
    directory = f"{TMP}/{PREFIX}{os.getpid()}-{secrets.token_hex(8)}"
    files = {CERT: security.tls_client_cert, KEY: security.tls_client_key}

    async def install_all():
        await asyncio.gather(*(_install(host, directory, files) for host in _distinct(hosts)))

    asyncio.run(install_all())
    return directory


def remove_over_ssh(hosts: list[SSHHost], directory: str) -> None:
    """Delete the session's credentials from every host (a host that cannot be reached keeps them: their
    scheduler is gone, so they open nothing)."""

    async def remove_all():
        await asyncio.gather(*(_remove(host, directory) for host in _distinct(hosts)), return_exceptions=True)

    asyncio.run(remove_all())


def slurm_folder(parent: Path) -> Path:
    """A new folder of mode 0700 for dask-jobqueue's copies of the credentials (module doc)."""
    parent.mkdir(parents=True, exist_ok=True)
    folder = parent / f"{PREFIX}{os.getpid()}-{secrets.token_hex(8)}"
    folder.mkdir(mode=0o700)
    return folder


def remove_jobqueue_copies(cluster, folder: Path) -> None:
    """dask-jobqueue's copies of the credentials closed (it keeps their files open on the cluster as
    ``_job_<key>`` and never closes them) and their folder removed."""
    for name, value in list(vars(cluster).items()):
        if name.startswith("_job_") and isinstance(value, tempfile._TemporaryFileWrapper):
            value.close()
    remove_folder(folder)


def remove_folder(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)


def remove_stale(*parents: Path) -> list[Path]:
    """Remove this host's credentials folders (in /tmp and ``parents``) whose controller is gone; returns them."""
    removed = []
    for parent in (Path(TMP), *parents):
        for folder in parent.glob(f"{PREFIX}*-*"):
            pid = folder.name.removeprefix(PREFIX).split("-")[0]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
    return removed
