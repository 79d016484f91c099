"""The surface the dashboard uses: `from engine import api`, and nothing else from the engine.

Every name the pages, ui/ and app.py need, imported plainly from the module that defines it, so a reader
finds each one's home here in one step. Importing this module does not import torch (a test checks it):
the dashboard loads torch only when a config is validated or a job is queued.
"""

from __future__ import annotations

from engine.advice import next_steps as observed_next_steps
from engine.advice.advisor import CONFIRM_REPEATS, advise, best_word, render_advice
from engine.advice.baseline import EXAMPLE as BASELINE_EXAMPLE
from engine.advice.baseline import parse as parse_baseline
from engine.advice.code import SNIPPETS, run_title, snippet
from engine.advice.memory import parse_size
from engine.advice.run_advice import RunAdvice, run_advice
from engine.analysis.charts import (
    METRIC_LABELS,
    auto_chart,
    compare_chart,
    epoch_breakdown_chart,
    epoch_chart,
    metric_chart,
    prediction_chart,
    step_timeline_chart,
)
from engine.analysis.kept import kept_epochs_limit
from engine.config import RunConfig, SweepConfig, config_fields, field_choices, field_type, field_value
from engine.errors import ConfigError
from engine.jobs import (
    RAY_ADDRESS_ENV,
    RAY_SWEEP,
    JobGroup,
    cancel,
    cancel_jobs,
    default_ray_address,
    ensure_worker,
    estimate_duration,
    job_groups,
    job_progress,
    list_jobs,
    submit,
    submit_ray_sweep,
    submit_sweep,
    worker_alive,
)
from engine.measure import PHASES as STARTUP_PHASES, VERDICTS, efficiency_text
from engine.paths import TRACE_FILE, db_path
from engine.plugins.browser import (
    PLUGIN_FIELDS,
    browser_config,
    browser_sweep,
    browser_sweep_config,
    browser_values,
    check_browser_config,
)
from engine.plugins.browser import choices as plugin_choices
from engine.presets import PRESETS
from engine.run.hostfit import check_machine as check_host  # the registry's rules, then the host's limits
from engine.run.hostfit import INSIST_HINT
from engine.run.hostfit import check_machine_all as check_host_all
from engine.runlog import end_traceback
from engine.status import RunStatus
from engine.store import (
    EXPLORE_FILTERS,
    EXPLORE_METRICS,
    count_runs,
    demo_summary,
    explore_axes,
    explore_filter_options,
    explore_predictions,
    explore_ranking,
    explore_summary,
    get_epochs,
    get_run,
    get_steps,
    ingest_pending,
    list_saved_queries,
    load_view,
    pending_summary,
    purge,
    restore,
    run_query,
    save_query,
    save_view,
    search_runs,
    set_notes,
    set_tags,
    soft_delete,
    table_schema,
    tune_answers,
    tune_ranking,
    tune_trials,
)
from engine.store.version import bump as bump_data_version
from engine.store.version import current as data_version
from engine.jobs.demo import demo_sweep
from engine.sweeps.ray import INSTALL_HINT, ray_available

__all__ = [
    "BASELINE_EXAMPLE",
    "CONFIRM_REPEATS",
    "ConfigError",
    "EXPLORE_FILTERS",
    "EXPLORE_METRICS",
    "INSIST_HINT",
    "INSTALL_HINT",
    "JobGroup",
    "METRIC_LABELS",
    "PLUGIN_FIELDS",
    "PRESETS",
    "RAY_ADDRESS_ENV",
    "RAY_SWEEP",
    "RunAdvice",
    "RunConfig",
    "RunStatus",
    "SNIPPETS",
    "STARTUP_PHASES",
    "SweepConfig",
    "TRACE_FILE",
    "VERDICTS",
    "advise",
    "auto_chart",
    "best_word",
    "browser_config",
    "browser_sweep",
    "browser_sweep_config",
    "browser_values",
    "bump_data_version",
    "cancel",
    "cancel_jobs",
    "check_browser_config",
    "check_host",
    "check_host_all",
    "compare_chart",
    "config_fields",
    "count_runs",
    "data_version",
    "db_path",
    "default_ray_address",
    "demo_summary",
    "demo_sweep",
    "efficiency_text",
    "end_traceback",
    "ensure_worker",
    "epoch_breakdown_chart",
    "epoch_chart",
    "estimate_duration",
    "explore_axes",
    "explore_filter_options",
    "explore_predictions",
    "explore_ranking",
    "explore_summary",
    "field_choices",
    "field_type",
    "field_value",
    "get_epochs",
    "get_run",
    "get_steps",
    "ingest_pending",
    "job_groups",
    "job_progress",
    "kept_epochs_limit",
    "list_jobs",
    "list_saved_queries",
    "load_view",
    "metric_chart",
    "observed_next_steps",
    "parse_baseline",
    "parse_size",
    "pending_summary",
    "plugin_choices",
    "prediction_chart",
    "purge",
    "ray_available",
    "render_advice",
    "restore",
    "run_advice",
    "run_query",
    "run_title",
    "save_query",
    "save_view",
    "search_runs",
    "set_notes",
    "set_tags",
    "snippet",
    "soft_delete",
    "step_timeline_chart",
    "submit",
    "submit_ray_sweep",
    "submit_sweep",
    "table_schema",
    "tune_answers",
    "tune_ranking",
    "tune_trials",
    "worker_alive",
]
