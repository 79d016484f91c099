"""The change `engine tune -- python train.py` answers with: the script's DataLoader(...) call as it should read, as a
unified diff against the script's own source (engine/advice/tune_script.py). Where the answer is the lab's threads
loader, the call becomes ThreadsLoader(...) with the same arguments, and the class (engine/observe/threads_loader.py,
the code its trials ran) is pasted after the script's imports.

    print(change("train.py:12", {"num_workers": 0}, {"num_workers": 4, "persistent_workers": True}))
"""

from __future__ import annotations

import ast
import difflib
import inspect
from pathlib import Path
from typing import Any

from engine.observe import LOADER_ARGS

__all__ = ["change"]


def change(site: str, base: dict[str, Any], best: dict[str, Any]) -> str:
    """The unified diff that turns the DataLoader(...) call at site (file:line) into one under `best`: each changed
    argument set in place (a keyword's value, or one given by position), the others added before the call's
    closing parenthesis; other intra-op threads are a torch.set_num_threads line before the call's statement."""
    path_text, _, line_text = site.rpartition(":")
    path, line = Path(path_text), int(line_text)
    source = path.read_text()
    tree = ast.parse(source)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.lineno <= line <= (n.end_lineno or n.lineno)]
    loaders = [n for n in calls if "DataLoader" in (ast.get_source_segment(source, n.func) or "")] or calls
    if not loaders:
        return ""
    call = min(loaders, key=lambda n: (n.end_lineno or n.lineno) - n.lineno)
    data = source.encode()
    starts = [0]
    for text_line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(text_line.encode()))

    def at(lineno: int, col: int) -> int:  # ast's columns are UTF-8 byte offsets
        return starts[lineno - 1] + col

    changes = {k: best.get(k) for k in LOADER_ARGS if best.get(k) != base.get(k) and (k in best or k in base)}
    edits: list[tuple[int, int, bytes]] = []
    if best.get("loader") == "threads":  # the same arguments to ThreadsLoader, which ignores the workers' own
        # NOTE: here, not at the top: the CLI imports this module and must not load torch before a command needs it
        from engine.observe.threads_loader import IMPORTS, ThreadsLoader

        changes = {k: v for k, v in changes.items() if k in ("num_workers", "pin_memory", "prefetch_factor")}
        edits.append(
            (
                at(call.func.lineno, call.func.col_offset),
                at(call.func.end_lineno or call.func.lineno, call.func.end_col_offset or 0),
                b"ThreadsLoader",
            )
        )
        imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        insert_at = at((imports[-1].end_lineno or imports[-1].lineno) + 1, 0) if imports else 0
        lines = set(source.splitlines())
        needed = "".join(f"{line}\n" for line in IMPORTS if line not in lines)  # the class's imports the script lacks
        code = ("\n" + needed if needed else "") + "\n\n" + inspect.getsource(ThreadsLoader) + "\n"
        edits.append((insert_at, insert_at, code.encode()))
    if not best.get("num_workers"):
        changes = {k: v for k, v in changes.items() if k in ("num_workers", "pin_memory")}
        for kw in call.keywords:  # settings only workers take: a loader without workers refuses them
            if kw.arg in ("persistent_workers", "prefetch_factor", "multiprocessing_context"):
                changes[kw.arg] = {"persistent_workers": False}.get(kw.arg)
    positional = (
        "dataset",
        "batch_size",
        "shuffle",
        "sampler",
        "batch_sampler",
        "num_workers",
        "collate_fn",
        "pin_memory",
        "drop_last",
        "timeout",
        "worker_init_fn",
        "multiprocessing_context",
    )
    given = {kw.arg: kw.value for kw in call.keywords if kw.arg}
    given.update({positional[i]: a for i, a in enumerate(call.args[: len(positional)])})
    added = []
    for key, value in changes.items():
        if key in given:
            node = given[key]
            edits.append(
                (
                    at(node.lineno, node.col_offset),
                    at(node.end_lineno or node.lineno, node.end_col_offset or 0),
                    repr(value).encode(),
                )
            )
        else:
            added.append(f"{key}={value!r}")
    if added:
        args: list[ast.expr | ast.keyword] = [*call.args, *call.keywords]
        if args:
            last = max(args, key=lambda n: (n.end_lineno or 0, n.end_col_offset or 0))
            end = at(last.end_lineno or last.lineno, last.end_col_offset or 0)
            edits.append((end, end, (", " + ", ".join(added)).encode()))
        else:
            end = at(call.end_lineno or call.lineno, (call.end_col_offset or 1) - 1)
            edits.append((end, end, ", ".join(added).encode()))
    if best.get("threads") and best.get("threads") != base.get("threads"):
        stmt = min(
            (
                n
                for n in ast.walk(tree)
                if isinstance(n, ast.stmt) and n.lineno <= call.lineno <= (n.end_lineno or n.lineno)
            ),
            key=lambda n: (n.end_lineno or n.lineno) - n.lineno,
        )
        indent = source.splitlines()[stmt.lineno - 1][: stmt.col_offset]
        plain = any(
            isinstance(n, ast.Import) and any(a.name == "torch" and not a.asname for a in n.names)
            for n in ast.walk(tree)
        )
        torch_name = "torch" if plain else "__import__('torch')"
        begin = at(stmt.lineno, 0)
        edits.append((begin, begin, f"{indent}{torch_name}.set_num_threads({best['threads']})\n".encode()))
    for begin, end, text in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        data = data[:begin] + text + data[end:]
    try:
        name = str(path.resolve().relative_to(Path.cwd()))
        before, after = f"a/{name}", f"b/{name}"
    except ValueError:  # outside the working folder: its own path on both sides
        before = after = str(path)
    return "".join(
        difflib.unified_diff(source.splitlines(keepends=True), data.decode().splitlines(keepends=True), before, after)
    )
