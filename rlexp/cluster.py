"""Where a run's MPI ranks go: over how many nodes, how mpiexec maps them there, and the checks that
the ranks really landed where they were asked to.

One run's ``comm.procs`` ranks span ``comm.nodes`` machines, ``procs / nodes`` on each. The machines
come from the SLURM allocation rlexp runs in (``hydra/launcher=slurm``, ``salloc``, an ``sbatch``
script: Open MPI reads it) or from ``comm.hostfile`` (clusters without SLURM). ``comm.nodes: null``
means the allocation's node count (the hostfile's host count; 1 outside both).

Open MPI 5 (PRRTE) puts every rank on the first node, silently and with exit status 0, under the
settings that make one node work (``PRTE_MCA_ras=^slurm`` or a bare ``--oversubscribe``), so a run
over several nodes gets its own mapping (``--map-by ppr:P:node``). Under SLURM, PRRTE starts its
daemons on the other nodes with ``srun``; SLURM's preemption and time-limit signal (USR2) reaches
those daemons too and kills them (mpiexec still exits 0), so they start through
``rlexp/prted_agent.sh``, which ignores USR1/USR2. Each rank then checks the world it joined
(:func:`check_world`): its size and its number of distinct hosts, and records the placement
(:func:`placement`) in the run's provenance.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from rlexp.errors import RLExpError
from rlexp.schema import CommConfig, usable_cores

# PRRTE's launch agent on the other nodes of a SLURM job (see the module docstring)
PRTED_AGENT = Path(__file__).resolve().parent / "prted_agent.sh"
# The variables a rank's node-local number is read from (Open MPI's, then PMIx's, then SLURM's)
LOCAL_RANK_VARS = ("OMPI_COMM_WORLD_LOCAL_RANK", "PMIX_LOCAL_RANK", "SLURM_LOCALID")


def slurm_nodes() -> int | None:
    """The node count of the SLURM allocation this process runs in, or None outside one."""
    if "SLURM_JOB_ID" not in os.environ:
        return None
    for var in ("SLURM_JOB_NUM_NODES", "SLURM_NNODES"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 1


def read_hostfile(path: str) -> list[str]:
    """The host names of an Open MPI hostfile (``host [slots=N] ...`` per line, ``#`` comments)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise RLExpError(
            f"comm.hostfile={path} cannot be read ({exc.strerror}); give an Open MPI hostfile, one host per line"
        ) from None
    hosts = []
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if words and words[0] not in hosts:
            hosts.append(words[0])
    if not hosts:
        raise RLExpError(
            f"comm.hostfile={path} lists no host; give one host per line (e.g. 'node01 slots=16')"
        )
    return hosts


def resolve_nodes(comm: CommConfig) -> int:
    """The number of nodes the run's ranks span (``comm.nodes``, or what null stands for), checked
    against what is there; a mismatch is an :class:`RLExpError` naming both."""
    if comm.hostfile is not None:
        have, where = len(read_hostfile(comm.hostfile)), f"comm.hostfile={comm.hostfile} lists"
    elif (alloc := slurm_nodes()) is not None:
        have, where = alloc, f"SLURM job {os.environ.get('SLURM_JOB_ID')} has"
    else:
        have, where = 1, "without a SLURM allocation or comm.hostfile there is"
    if comm.procs == 1 and comm.nodes is None:
        return 1
    nodes = have if comm.nodes is None else comm.nodes
    key = f"comm.nodes={comm.nodes}" if comm.nodes is not None else f"comm.nodes=null ({nodes} nodes)"
    if nodes > have:
        hint = (
            ""
            if have > 1
            else "; run inside a SLURM allocation (hydra/launcher=slurm, salloc, sbatch) or give comm.hostfile"
        )
        raise RLExpError(f"{key} but {where} {have} node{'s' if have != 1 else ''}{hint}")
    if comm.procs % nodes:
        raise RLExpError(
            f"comm.procs={comm.procs} does not split evenly over {key}; use a multiple of {nodes} "
            "(procs counts the ranks of all nodes)"
        )
    return nodes


def spans_nodes(comm: CommConfig, nodes: int) -> bool:
    """Whether the ranks are placed by the multi-node mapping (several nodes, or a hostfile)."""
    return nodes > 1 or comm.hostfile is not None


def sharing_note(comm: CommConfig, nodes: int, jobs: int = 1) -> str | None:
    """A line for a run on one machine whose ranks (``jobs`` runs of them at a time, a parallel sweep's)
    outnumber the cores this process may use: they take turns, so the extra ranks add no speed (on this
    2-core machine TD3 with ``comm.procs=8`` took as long as with 2). None when they fit, for one rank,
    and for runs over several nodes or a hostfile (their cores are the allocation's)."""
    if comm.procs == 1 or spans_nodes(comm, nodes):
        return None
    cores, ranks = usable_cores(), comm.procs * jobs
    if ranks <= cores:
        return None
    what = f"{comm.procs} ranks" if jobs == 1 else f"{comm.procs} ranks in each of {jobs} runs at a time"
    return (
        f"comm.procs={comm.procs}: {what} share this machine's {cores} core{'s' * (cores != 1)} and take "
        "turns (oversubscribed): ranks beyond the cores add no speed"
    )


def launch_agent(mpiexec: str) -> str:
    """PRRTE's launch agent for the other nodes of a SLURM job: ``/bin/sh``, rlexp's agent script (no
    executable bit needed) and the ``prted`` beside ``mpiexec`` (else the one on PATH). PRRTE splits
    the string at whitespace and knows no quoting, so a path with whitespace is an :class:`RLExpError`."""
    prted = Path(mpiexec).resolve().parent / "prted"
    parts = ["/bin/sh", str(PRTED_AGENT), str(prted) if prted.is_file() else "prted"]
    for part in parts:
        if any(c.isspace() for c in part):
            raise RLExpError(
                f"ranks on several nodes of a SLURM job cannot be started from {part!r}: PRRTE splits its "
                "launch agent's command at spaces; install rlexp and Open MPI (the venv) under a path "
                "without spaces"
            )
    return " ".join(parts)


def mpiexec_placement(comm: CommConfig, nodes: int, mpiexec: str) -> list[str]:
    """mpiexec's arguments that place the ranks: ``procs / nodes`` per node over several nodes (with
    the USR2-proof launch agent under SLURM), else the one-node settings; and the network."""
    args: list[str] = []
    if not spans_nodes(comm, nodes):
        if comm.oversubscribe:
            args.append("--oversubscribe")
    else:
        mapping = f"ppr:{comm.procs // nodes}:node" + (":OVERSUBSCRIBE" if comm.oversubscribe else "")
        args += ["--map-by", mapping]
        if comm.hostfile is not None:
            args += ["--hostfile", str(Path(comm.hostfile).resolve())]
        if slurm_nodes() is not None:
            args += ["--prtemca", "prte_launch_agent", launch_agent(mpiexec)]
    if comm.interface is not None:
        args += [
            "--prtemca",
            "oob_tcp_if_include",
            comm.interface,
            "--mca",
            "btl_tcp_if_include",
            comm.interface,
        ]
    return args


def slurm_environment(env: dict[str, str], comm: CommConfig, nodes: int) -> None:
    """What mpiexec needs in a SLURM job (in place): on one node with one task of N CPUs, PRRTE would
    count 1 slot, so SLURM's allocation is not read (``PRTE_MCA_ras=^slurm``); over several nodes it
    must be read, and PRRTE's inner ``srun`` may overlap the job step it runs in (submitit's)."""
    if "SLURM_JOB_ID" not in env:
        return
    if spans_nodes(comm, nodes):
        env["SLURM_OVERLAP"] = "1"
    else:
        env.setdefault("PRTE_MCA_ras", "^slurm")


def local_rank() -> int:
    """This rank's number among the ranks of its node (0 without a launcher that says)."""
    for var in LOCAL_RANK_VARS:
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 0


def rank_gpu(name: str, gpus: int) -> int | None:
    """The GPU index this rank computes on for ``backend.device=name`` with ``gpus`` GPUs visible:
    ``cuda`` (or ``auto`` with GPUs) takes the GPU of the rank's local rank (``local_rank % gpus``), so
    the ranks of each node spread over its GPUs; ``cuda:N`` is GPU N for every rank; None: the CPU."""
    if name.startswith("cuda:"):
        return int(name[5:])
    if name == "cuda" or (name == "auto" and gpus > 0):
        return local_rank() % gpus if gpus > 0 else 0
    return None


def placement(device: str | None = None) -> dict[str, Any]:
    """This rank's place: its host, its number on that host and (given) the device it computes on."""
    row: dict[str, Any] = {"host": socket.gethostname(), "local_rank": local_rank()}
    if device is not None:
        row["device"] = device
    return row


def check_world(size: int, hosts: list[str], procs: int, nodes: int | None) -> None:
    """Raise :class:`RLExpError` unless the MPI world has ``procs`` ranks on ``nodes`` distinct hosts
    (``hosts``: each rank's host; ``nodes`` None: the host count is not checked)."""
    distinct = sorted(set(hosts))
    where = f"{len(distinct)} host{'s' if len(distinct) != 1 else ''} ({', '.join(distinct)})"
    if size != procs:
        raise RLExpError(
            f"the MPI world has {size} rank{'s' if size != 1 else ''} on {where} but comm.procs={procs}; mpiexec started a "
            "different number of ranks (check comm.extra_args and the allocation's tasks)"
        )
    if nodes is not None and len(distinct) != nodes:
        raise RLExpError(
            f"the {size} ranks run on {where} but {nodes} node{'s' if nodes != 1 else ''} were asked for; "
            "Open MPI did not read the allocation (an exported PRTE_MCA_ras=^slurm or --oversubscribe in "
            "comm.extra_args puts every rank on the first node)"
        )
