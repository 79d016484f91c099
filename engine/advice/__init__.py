"""What to run next, from what was measured: the advisor's verdict and pick (advisor), the user's own setup
as a baseline (baseline, and read from their own DataLoader: read_loader), the tuner that searches a budget of runs
(tune), the answer as code (code) and memory against a cap (memory); the user's own script tuned as it is, trial by
trial (tune_script, with _script_trials and _script_change). The epoch-time predictor it ranks by lives in
engine/predict/ (the model, the probe, and what earlier runs say: learned.py).
"""

from engine.advice._baseline_from import read_loader
from engine.advice._baseline_run import baseline_of_run, next_steps, observed_line, predict_fields, resolve_baseline

__all__ = ["baseline_of_run", "next_steps", "observed_line", "predict_fields", "read_loader", "resolve_baseline"]
