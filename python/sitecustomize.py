"""pinscope's Python hook, loaded into the job by `pinscope run`.

`pinscope run` puts this folder first on the job's PYTHONPATH, so Python
imports this module at start-up (site.py imports `sitecustomize`). It
installs pinscope_hook (DataLoader timing for the pipeline model,
docs/python-hook.md), then runs the sitecustomize this one hides, if any, so
a job's own sitecustomize still runs. It never raises: a hook that cannot
work stays passive and says so once on stderr.
"""


def _pinscope_start():
    import os
    import sys

    try:
        import pinscope_hook

        pinscope_hook.install()
    except Exception as error:  # never take the job down
        sys.stderr.write("pinscope: the Python hook is off (%s: %s)\n" % (type(error).__name__, error))

    # The sitecustomize that this one shadows: the next on sys.path.
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        import importlib.machinery
        import importlib.util

        for entry in sys.path:
            if not entry or os.path.abspath(entry) == here:
                continue
            spec = importlib.machinery.PathFinder.find_spec("sitecustomize", [entry])
            if spec is None or spec.loader is None:
                continue
            module = importlib.util.module_from_spec(spec)
            sys.modules["sitecustomize"] = module
            spec.loader.exec_module(module)
            break
    except Exception as error:
        sys.stderr.write("pinscope: the job's own sitecustomize failed: %s: %s\n" % (type(error).__name__, error))


_pinscope_start()
del _pinscope_start
