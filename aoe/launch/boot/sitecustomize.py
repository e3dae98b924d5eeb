"""`aoe run`'s bootstrap: the child interpreter imports this first (its directory leads PYTHONPATH).

It installs aoe's import hooks (`aoe.launch.hooks`) before the training script runs, then hands over
to the environment's own `sitecustomize`, if there is one further along the path.
"""
import importlib.machinery
import importlib.util
import os
import sys


def _boot() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        from aoe.launch import hooks

        hooks.install()
    except Exception as exc:  # noqa: BLE001 - never break the user's script: say so and run it plain
        print(f"aoe run: warning: hooks not installed ({type(exc).__name__}: {exc}); the script runs untuned",
              file=sys.stderr)
    # the sitecustomize this one shadows (a distribution's or a virtualenv's) still runs
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


_boot()
