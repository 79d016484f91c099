"""Pure functions of stored runs: medians and intervals (stats), lab.compare's table (compare), which runs answer
"what is fastest" for Explore's headline and the advisor alike (answer) and the dashboard's figures (charts). No
torch, no store writes.
"""
