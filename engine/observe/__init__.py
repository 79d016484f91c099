"""The user's own training loop, observed: `watch(loader)` in the loop, or no edit at all with
`python -m engine observe -- python train.py ARGS` (engine/run/observed.py starts it; _boot.py runs in the script).

    _watch.py     watch(loader): one line in the loop
    _boot.py      the observe command's bootstrap in the script's process: observes every DataLoader it iterates
    _hub.py       which loader is which stream, and how the runs end when the program does
    _live.py      the live streams: which are in an epoch, which contain another's, ending and storing them
    _stream.py    one loader's run: its RunLog, sampler and the timing of each epoch (loaded once torch is)
    _settings.py  the loader's settings read from the object, mapped onto RunConfig's fields where they map
    _trial.py     a trial of `engine tune -- python train.py`: the tuned loader's setting, and the trial's stop
    threads_loader.py   the lab's threads loader over a script's map-style dataset: a trial's, and the answer's code

Importing this package imports neither torch nor the store.
"""

from pathlib import Path

from engine.observe._boot import ENV_ROOT
from engine.observe._hub import ENV_NAME, ENV_PREFIX, ENV_RUNS, ENV_STORE
from engine.observe._trial import ENV_SECONDS, ENV_SETTING, ENV_SITE, ENV_STEPS, ENV_TRIAL, LOADER_ARGS
from engine.observe._watch import Watched, watch

__all__ = [
    "BOOT",
    "ENV_NAME",
    "ENV_PREFIX",
    "ENV_ROOT",
    "ENV_RUNS",
    "ENV_SECONDS",
    "ENV_SETTING",
    "ENV_SITE",
    "ENV_STEPS",
    "ENV_STORE",
    "ENV_TRIAL",
    "LOADER_ARGS",
    "Watched",
    "watch",
]

BOOT = Path(__file__).with_name("_boot.py")  # run as a file in the script's interpreter, never imported there
