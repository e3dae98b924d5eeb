"""Plots of a search benchmark (matplotlib, imported lazily: extra `bench`)."""
from __future__ import annotations

import os

from ..durable import atomic_replace
from ..errors import AoeError
from .harness import Results

GAP_CEIL = 10.0  # gaps above 1000% (or no valid strategy yet) are drawn at the ceiling


def _pyplot():
    try:
        import matplotlib
    except ImportError as exc:
        raise AoeError("plots need matplotlib: pip install 'aoe[bench]' (or skip them with --no-plots)") from exc
    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str) -> None:
    """Write a figure by aoe's one writer rule (`aoe.durable.atomic_replace`)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    try:
        atomic_replace(path, buf.getvalue())
    except OSError as exc:
        raise AoeError(f"cannot write {path}: {exc.strerror or exc}") from None


def _clip(v: list[float | None]) -> list[float]:
    return [GAP_CEIL * 100 if x is None else min(x, GAP_CEIL) * 100 for x in v]


def plot_results(results: Results, out_dir: str) -> list[str]:
    """Write `anytime.png` (gap vs evaluations, median and quartiles) and `summary.png`; return the paths."""
    plt = _pyplot()
    os.makedirs(out_dir, exist_ok=True)
    summ = results.summary()
    names = [s["name"] for s in results.strategies]
    colors = {n: plt.get_cmap("tab10")(i % 10) for i, n in enumerate(names)}
    paths = []

    fig, axes = plt.subplots(1, len(results.budgets), figsize=(5.2 * len(results.budgets), 4.2), squeeze=False)
    for ax, b in zip(axes[0], results.budgets):
        for n in names:
            r = summ[n].get(str(b))
            if r is None:
                continue
            c = r["curve"]
            ax.plot(c["evals"], _clip(c["median"]), color=colors[n], label=n, lw=1.6)
            ax.fill_between(c["evals"], _clip(c["q1"]), _clip(c["q3"]), color=colors[n], alpha=0.15, lw=0)
        ax.set_xscale("log")
        ax.set_yscale("symlog", linthresh=1.0)
        ax.set_ylim(bottom=0)
        ax.axhline(1.0, color="grey", lw=0.8, ls=":")
        ax.set_title(f"budget {b} evaluations")
        ax.set_xlabel("evaluations")
        ax.grid(alpha=0.3, which="both")
    axes[0][0].set_ylabel("gap to the reference optimum, % (median, quartiles)")
    axes[0][0].legend(fontsize=8)  # the smallest budget runs every strategy
    fig.suptitle(f"{len(results.cases)} cases ({results.suite}) on {results.soc}")
    fig.tight_layout()
    paths.append(os.path.join(out_dir, "anytime.png"))
    _save(fig, paths[-1])
    plt.close(fig)

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for n in names:
        bs = [b for b in results.budgets if str(b) in summ[n]]
        if not bs:
            continue
        a1.plot(bs, [100 * summ[n][str(b)]["within_1pct"] for b in bs], "o-", color=colors[n], label=n)
        a2.plot(bs, [summ[n][str(b)]["wall_s_median"] for b in bs], "o-", color=colors[n], label=n)
    a1.set(xscale="log", xlabel="budget (evaluations)", ylabel="cases within 1% of the reference, %", ylim=(0, 102))
    a2.set(xscale="log", yscale="log", xlabel="budget (evaluations)", ylabel="wall seconds per case (median)")
    for a in (a1, a2):
        a.grid(alpha=0.3, which="both")
    a1.legend(fontsize=8)
    fig.tight_layout()
    paths.append(os.path.join(out_dir, "summary.png"))
    _save(fig, paths[-1])
    plt.close(fig)
    return paths
