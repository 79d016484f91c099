"""What to run next, from what was measured: the advisor's verdict and pick (advisor), the user's own setup
as a baseline (baseline), the tuner that searches a budget of runs (tune) and the epoch-time predictor (predict).
"""

from engine.advice._baseline_run import (baseline_of_run, next_steps, observed_line, predict_fields,
                                           resolve_baseline)

__all__ = ["baseline_of_run", "next_steps", "observed_line", "predict_fields", "resolve_baseline"]
