"""``python -m ember_np``: the ``ember-np`` command line (see ember_np.cli)."""

from ember_np.cli import main

raise SystemExit(main())
