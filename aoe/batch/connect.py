"""Connecting to a Dask cluster: `local:N` over TLS, `tls://` with certificates, `tcp://` with a warning,
and the probe that every worker runs the client's aoe.

`local:N` starts a `LocalCluster` on 127.0.0.1 whose scheduler and workers speak TLS with a throw-away
certificate authority made for this process (`distributed.security.Security.temporary()`): only this
client holds the key, so no other local process can submit code to its workers. A `tls://` scheduler
takes a CA certificate, client certificate and key (`TlsFiles`, the `aoe batch --tls_*` flags) or Dask's
own configuration (`distributed.comm.tls.ca-file`, `.client.cert`, `.client.key`). A plain `tcp://`
scheduler works but gets one `ClusterWarning`: anyone who can reach it can run code on its workers.
"""
from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import AoeError

EXTRA_HINT = "batch tuning on a cluster needs Dask: pip install 'aoe[dask]' (dask[distributed])"
TLS_HINT = ("a tls:// scheduler needs a CA certificate and a client certificate and key: aoe batch "
            "--tls_ca_file CA.pem --tls_cert CERT.pem --tls_key KEY.pem, aoe.batch.TlsFiles(...), or Dask's "
            "config distributed.comm.tls.ca-file / .client.cert / .client.key (see aoe/batch/README.md)")


class ClusterWarning(UserWarning):
    """A cluster that works but is open to others (a plain tcp:// scheduler)."""


@dataclass(frozen=True)
class TlsFiles:
    """The PEM files a client needs for a tls:// scheduler (None: from Dask's config)."""

    ca_file: str | None = None     # the CA that signed the scheduler's and workers' certificates
    cert: str | None = None        # this client's certificate (may hold the key too)
    key: str | None = None         # this client's private key

    def given(self) -> dict[str, str]:
        """The files set here, as `distributed.security.Security` keywords; AoeError if one is missing."""
        out = {}
        for field, kw in (("ca_file", "tls_ca_file"), ("cert", "tls_client_cert"), ("key", "tls_client_key")):
            path = getattr(self, field)
            if path is None:
                continue
            if not os.path.isfile(path):
                raise AoeError(f"TLS {field} file {path!r} does not exist or is not a file; give the PEM file "
                               f"of your cluster's certificates")
            out[kw] = os.fspath(path)
        return out


def _security(tls: TlsFiles | None) -> Any:
    """The client's `Security` for a tls:// scheduler: the given files over Dask's config."""
    from distributed.security import Security

    sec = Security(require_encryption=True, **(tls.given() if tls is not None else {}))
    if not sec.tls_ca_file or not sec.tls_client_cert:
        raise AoeError(TLS_HINT)
    return sec


def warn_if_plain(address: str) -> None:
    """One ClusterWarning when the scheduler is reached over plain tcp://."""
    if address.startswith("tcp://"):
        warnings.warn(f"the Dask scheduler at {address} speaks plain tcp://: it is neither encrypted nor "
                      f"authenticated, so anyone who can reach it can run code on its workers; use a tls:// "
                      f"scheduler with certificates, or local:N (see aoe/batch/README.md)",
                      ClusterWarning, stacklevel=3)


def connect(cluster: Any, tls: TlsFiles | None = None) -> tuple[Any, Any, bool]:
    """(client, cluster we started or None, whether we own the client) for a Client, an address or local:N."""
    try:
        import distributed
    except ImportError:
        raise AoeError(EXTRA_HINT) from None
    if isinstance(cluster, distributed.Client):
        warn_if_plain(str(getattr(cluster.scheduler, "address", "") or ""))
        return cluster, None, False
    if not isinstance(cluster, str) or not cluster.strip():
        raise AoeError(f"cluster must be a dask.distributed.Client, a scheduler address such as "
                       f"tls://host:8786, or 'local:N'; got {cluster!r}")
    text = cluster.strip()
    if text.startswith("local:"):
        try:
            n = int(text[6:])
        except ValueError:
            n = 0
        if not 1 <= n <= 256:
            raise AoeError(f"'local:N' needs N worker processes between 1 and 256, got {text!r}")
        return _local(distributed, n)
    if tls is not None and tls.given() and not text.startswith("tls://"):
        raise AoeError(f"TLS files were given but the scheduler address {text!r} is not tls://host:port")
    security = _security(tls) if text.startswith("tls://") else None
    try:
        client = distributed.Client(text, timeout="30s", security=security)
    except (OSError, TimeoutError) as exc:
        how = " and that its certificates are signed by the CA given" if security is not None else ""
        raise AoeError(f"cannot reach the Dask scheduler at {text}: {exc}; start it with `dask scheduler`, "
                       f"check the address{how}") from None
    except ValueError as exc:  # e.g. an unknown protocol
        raise AoeError(f"cannot use the Dask scheduler address {text!r}: {exc}") from None
    warn_if_plain(text)
    return client, None, True


def _local(distributed: Any, n: int) -> tuple[Any, Any, bool]:
    """A LocalCluster of n single-threaded worker processes on 127.0.0.1, over TLS with a temporary CA."""
    from distributed.security import Security

    try:
        security = Security.temporary()  # a fresh CA and key in memory: nobody else can connect
    except ImportError:
        raise AoeError(f"local:N runs its cluster over TLS, which needs the 'cryptography' package: "
                       f"pip install 'aoe[dask]' (or pip install cryptography)") from None
    lc = distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  protocol="tls://", security=security, dashboard_address="127.0.0.1:0",
                                  silence_logs=logging.ERROR)
    try:
        return distributed.Client(lc, security=security), lc, True
    except BaseException:
        lc.close()
        raise


def _worker_probe() -> Callable[[], str]:
    """A function that reports what a worker imports as aoe: its version, or why the simulator is missing.

    Made inside a function so that Dask pickles it by value: a worker whose aoe is missing or broken can
    still run it (a function of this module would make the worker import aoe just to unpickle the probe,
    and a worker that fails to unpickle drops its connection instead of reporting an error)."""
    def probe() -> str:
        import importlib

        try:
            importlib.import_module("aoe._sim")
            return "ok " + str(importlib.import_module("aoe").__version__)
        except Exception as exc:  # noqa: BLE001 - reported to the client, which raises AoeError
            return f"{type(exc).__name__}: {exc}"
    return probe


def check_workers(client: Any) -> None:
    """AoeError unless every worker imports the same aoe as this process, with its compiled simulator."""
    from .. import __version__

    try:
        answers = client.run(_worker_probe())
    except Exception as exc:  # noqa: BLE001 - a cluster we cannot even probe is a setup error
        raise AoeError(f"cannot run a probe on the Dask workers ({type(exc).__name__}: {exc}); {EXTRA_HINT} "
                       f"and install this aoe on every worker") from None
    bad = {addr: a for addr, a in sorted(answers.items()) if a != f"ok {__version__}"}
    if bad:
        addr, why = next(iter(bad.items()))
        raise AoeError(f"{len(bad)} of {len(answers)} Dask worker(s) cannot run aoe {__version__} (e.g. {addr}: "
                       f"{why}); install the same aoe on every worker (pip install 'aoe[dask]'), and start "
                       f"the workers outside an aoe source checkout")
