"""What to run next, from what was measured: the advisor's verdict and pick (advisor), the user's own setup
as a baseline (baseline, and read from their own DataLoader: read_loader), the tuner that searches a budget of runs
(tune), the epoch-time predictor (predict), the answer as code (code) and memory against a cap (memory).
"""

from engine.advice._baseline_from import read_loader

__all__ = ["read_loader"]
