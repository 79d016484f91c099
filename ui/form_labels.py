"""What the launch form calls a config field, and how it says a refusal, for a person in a browser.

The schema's names (n_samples, work_us) stay the truth: the form's help names each one, and a URL, a TOML file and
the store use them. A field not listed here is labelled from its name, so a new field still gets a widget.

    label("work_us")      # "CPU work/sample (µs)"
    refusal(e.message)    # the message, with the CLI's --oversubscribe said as the form's checkbox
"""

from __future__ import annotations

from engine import api

__all__ = ["LABEL_MAX", "label", "refusal"]

_LABELS = {
    "workload": "Workload",
    "n_samples": "Samples per epoch",
    "image_size": "Image size (px)",
    "num_classes": "Classes",
    "work_us": "CPU work/sample (µs)",
    "latency_ms": "Storage latency (ms)",
    "folder": "Image folder",
    "loader": "Loader",
    "workers": "Workers",
    "prefetch_depth": "Prefetch depth",
    "start_method": "Worker start method",
    "persistent_workers": "Persistent workers",
    "pin_memory": "Pin host memory",
    "worker_timeout_s": "Worker timeout (s)",
    "width": "Width",
    "depth": "Depth",
    "lr": "Learning rate",
    "collate": "Collate function",
    "loss": "Loss function",
    "batch_size": "Batch size",
    "warmup_epochs": "Warm-up epochs",
    "threads": "Intra-op threads",
    "n_models": "Models (fused)",
    "lr_spread": "LR spread (fused)",
    "model_b": "Second model (dual)",
    "width_b": "Second width (dual)",
    "dual_data": "Data (dual)",
    "devices": "Devices (dual/split)",
    "n_stages": "Stages (split)",
    "micro_batches": "Micro-batches",
    "world_size": "Processes (ddp)",
    "bound": "Measure lower bound",
    "sample_hz": "Sampling rate (Hz)",
    "trace": "Profiler trace",
    "sweep.repeats": "Repeats",
}
LABEL_MAX = 20  # characters a label may have before a form column cuts it ("Keep workers b…"); the help says more
_BROWSER_INSIST = "tick “Oversubscribe” under the form to insist"


def label(name: str) -> str:
    """A field's label: words, not the schema's identifier, at most LABEL_MAX characters (the help has the rest)."""
    return _LABELS.get(name) or name.replace("_", " ").capitalize()


def refusal(message: str) -> str:
    """A ConfigError's message as the browser says it: the checkbox, never a CLI flag."""
    return message.replace(api.INSIST_HINT, _BROWSER_INSIST)
