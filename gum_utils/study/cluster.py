"""Where the grid's cells run: a Dask cluster on this machine, a running one, or SLURM jobs.

    --jobs N                      a LocalCluster of N worker processes, one thread each
    --scheduler tcp://HOST:PORT   a running cluster (`dask scheduler`; `dask worker ADDRESS --nthreads 1`)
    --slurm [--queue ...]         SLURM jobs of one worker each, as many as the grid asks (adaptive)

A worker runs one cell at a time (one thread: its warm kernel serves one cell), so a worker
process is a "job" of the grid. Workers need the gum_utils package installed, nothing else.
"""

import logging
import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass

from .cell import KernelShutdown


@dataclass(frozen=True)
class SlurmJobs:
    """A SLURM job per worker. None takes dask-jobqueue's configuration (jobqueue.slurm.*)."""

    queue: str | None = None
    account: str | None = None
    gpus_per_job: int = 0
    walltime: str | None = None
    cpus_per_job: int = 4
    memory_per_job: str = "16GB"
    max_jobs: int = 4

    def cluster(self, scheduler_options: dict | None = None):
        """The SLURMCluster; it submits nothing until it is scaled."""
        import dask

        SLURMCluster = _slurm_cluster_class()
        directives = list(dask.config.get("jobqueue.slurm.job-extra-directives", []))
        if self.gpus_per_job:
            directives.append(f"--gpus={self.gpus_per_job}")
        # cores=1: one thread, one cell at a time; job_cpu books the cores the cell's kernel uses.
        return SLURMCluster(queue=self.queue, account=self.account, walltime=self.walltime, cores=1, processes=1,
                            job_cpu=self.cpus_per_job, memory=self.memory_per_job, job_extra_directives=directives,
                            scheduler_options=scheduler_options)


def _slurm_cluster_class():
    """dask_jobqueue's SLURMCluster, imported without its side effect: on import it replaces the
    process's Ctrl-C handler with sys.exit, so an interrupted grid would end with status 0 and
    say nothing of what it kept. The handler before is put back."""
    handler = signal.getsignal(signal.SIGINT)
    from dask_jobqueue import SLURMCluster

    if handler is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, handler)
    return SLURMCluster


class ClusterUnavailable(OSError):
    """The cluster asked for cannot start here; the message says why and what to do."""


def check_loopback(timeout_s: float = 3.0, needed_by: str = "the local Dask cluster",
                   otherwise: str = "or give a running cluster with --scheduler tcp://HOST:PORT") -> None:
    """The local cluster (and a Jupyter kernel) talks over 127.0.0.1: with the loopback interface down,
    Dask would time out after 30 s with a traceback. A socket that connects to itself tells at once."""
    import socket

    try:
        with socket.socket() as server:
            server.bind(("127.0.0.1", 0))
            server.listen(1)
            with socket.create_connection(server.getsockname(), timeout=timeout_s):
                pass
    except OSError as error:
        raise ClusterUnavailable(f"{needed_by} needs the loopback interface (127.0.0.1), which does not answer "
                                 f"here ({error.strerror or error}); bring it up (ip link set lo up)"
                                 + (f" {otherwise}" if otherwise else "")) from None


def local_cluster(jobs: int):
    from distributed import LocalCluster

    check_loopback()
    # Loopback only and no dashboard: nothing listens beyond this machine. The scheduler's HTTP routes
    # (health) still listen: on a free loopback port, not 8787, which another cluster may hold.
    try:
        # Dask's warnings only at ERROR: those it logs are about the cells it cancels and the workers it
        # ends when the grid is stopped, said by the grid's own line (a cell's errors are in its notebook).
        return LocalCluster(n_workers=jobs, threads_per_worker=1, processes=True, host="127.0.0.1",
                            dashboard_address="127.0.0.1:0", scheduler_kwargs={"dashboard": False},
                            silence_logs=logging.ERROR)
    except RuntimeError as error:  # "Cluster failed to start: ..." (a worker could not reach the scheduler)
        raise ClusterUnavailable(f"the local Dask cluster did not start: {error}") from None


@contextmanager
def open_client(jobs: int = 1, scheduler: str | None = None, slurm: SlurmJobs | None = None):
    """A Dask client of the cluster asked for (local by default), closed with the cluster on exit."""
    from distributed import Client

    cluster = None
    if scheduler is None:
        cluster = slurm.cluster() if slurm else local_cluster(jobs)
        if slurm:
            cluster.adapt(minimum_jobs=0, maximum_jobs=slurm.max_jobs)
    try:
        with Client(scheduler or cluster) as client:
            client.register_plugin(KernelShutdown())
            yield client
    finally:
        if cluster is not None:
            cluster.close()


def describe(client) -> str:
    from distributed import LocalCluster

    if isinstance(client.cluster, LocalCluster):
        return f"{len(client.cluster.workers)} local worker(s)"
    if client.cluster is not None:
        return f"{type(client.cluster).__name__} jobs (adaptive)"
    return f"the cluster at {client.scheduler.address}"


def worker_count(client) -> int:
    return len(client.scheduler_info(n_workers=-1)["workers"])
