"""One run, start to end: checked against this host (hostfit), a plugin tried on one batch (preflight and its
child, _plugin_check), started cold (runner) or forked from a warm parent (warm and its server, _warm_server),
recorded in a RunLog and ingested.

    from engine.run.runner import launch
    python -m engine.run.runner data/runs/<run_id>     # the run child

Nothing is imported here: each launcher takes the module it needs, and none of them loads torch by importing.
"""
