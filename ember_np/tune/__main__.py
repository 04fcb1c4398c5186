"""``python -m ember_np.tune``: one worker process (see ``spawn_workers``)."""

import sys

from ember_np.tune.storage import TuneError
from ember_np.tune.workers import worker_main

if __name__ == "__main__":
    try:
        raise SystemExit(worker_main())
    except KeyboardInterrupt:  # stopped before it started a trial
        raise SystemExit(130) from None
    except TuneError as exc:
        print(f"ember-np tune: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
