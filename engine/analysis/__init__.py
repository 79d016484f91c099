"""Pure functions of stored runs: medians and intervals (stats), lab.compare's table (compare) and the
dashboard's figures (charts). No torch, no store writes.
"""
