"""What to run next, from what was measured: the advisor's verdict and pick (advisor), the user's own setup
as a baseline (baseline), the tuner that searches a budget of runs (tune) and the epoch-time predictor (predict).
"""
