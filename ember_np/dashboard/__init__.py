"""A live training dashboard: ``ember-np dashboard [RUNS_ROOT]``.

:mod:`ember_np.dashboard.logs` reads the runs root (run discovery,
incremental JSONL reads, multi-seed IQM curves); :mod:`ember_np.dashboard.server`
serves the page in ``static/`` and the JSON API. Standard library only, plus NumPy.
"""

from ember_np.dashboard.server import DEFAULT_HOST, DEFAULT_PORT, make_server, serve

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "make_server", "serve"]
