#!/usr/bin/python
"""Ansible module: rank 0's progress lines of any script as a table and a plot, on the
controller."""

from __future__ import annotations

import glob
import importlib.util
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.progress import (
    numeric_series,
    progress_csv,
    progress_rows,
    rank0_attempts,
    regex_groups,
    restarts,
    x_axis,
)

DOCUMENTATION = r"""
module: torch_job_progress
short_description: Turn rank 0's progress lines into progress.csv and progress.png
description:
  - Reads the nodes' logs that came back to the job's runs folder (C(<node>.log)), takes rank
    0's lines of each attempt (on that attempt's node_rank 0), and writes each line that
    I(regex) matches, with its named groups' values, to C(progress.csv).
  - Plots each group that reads as a number against the C(step) group, else the C(epoch)
    group, else rank 0's line number, into C(progress.png), with the restarts marked.
    Without matplotlib on the controller, only the table is written.
  - A regex without named groups writes nothing.
options:
  run_dir:
    description: The job's runs folder on the controller.
    type: path
    required: true
  regex:
    description: train_progress_regex; its named groups are the table's columns.
    type: str
    required: true
  job_id:
    description: The job's id, for the plot's title.
    type: str
    default: ""
"""

RETURN = r"""
rows:
  description: The lines the regex matched.
  type: int
  returned: always
csv:
  description: The table's path, or an empty string when none was written.
  type: str
  returned: always
plot:
  description: The plot's path, or an empty string when none was drawn.
  type: str
  returned: always
"""


def plot(path: str, rows, x: str, series: list[str], title: str) -> str:
    """Draw the plot; '' when done, else why not."""
    # Optional: the table is written without it.
    if importlib.util.find_spec("matplotlib") is None:
        return "matplotlib is not installed on the controller"
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    xs = [row.line if x == "line" else row.values[x] for row in rows]
    figure, axes = plt.subplots(
        len(series), 1, figsize=(8, 2.6 * len(series) + 0.6), sharex=True, squeeze=False
    )
    starts = restarts(rows)
    for axis, name in zip(axes[:, 0], series):
        # One line per attempt: a restart from an earlier checkpoint goes back in x, and
        # its line starts again there instead of joining the last attempt's end.
        for first, last in zip([0, *starts], [*starts, len(rows)]):
            points = [
                (xs[i], rows[i].values[name])
                for i in range(first, last)
                if isinstance(rows[i].values.get(name), float)
            ]
            axis.plot(
                [p[0] for p in points], [p[1] for p in points], color="tab:blue", marker=".",
                linewidth=1.2,
            )  # fmt: skip
        axis.set_ylabel(name)
        axis.grid(True, alpha=0.3)
        top = axis.get_ylim()[1]
        for index in starts:
            axis.axvline(xs[index], color="tab:red", linestyle="--", linewidth=1)
            label = f" restart: attempt {rows[index].attempt}"
            axis.text(xs[index], top, label, color="tab:red", va="top", fontsize=8)
    axes[-1, 0].set_xlabel("rank 0's line" if x == "line" else x)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return ""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "run_dir": {"type": "path", "required": True},
            "regex": {"type": "str", "required": True},
            "job_id": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        groups = regex_groups(params["regex"])
    except ValueError as err:
        module.fail_json(msg=str(err))
    result = {"changed": False, "rows": 0, "csv": "", "plot": ""}
    if not groups:
        module.exit_json(msg="train_progress_regex has no named groups: no table", **result)
    logs = {}
    for path in sorted(glob.glob(os.path.join(params["run_dir"], "*.log"))):
        with open(path, encoding="utf-8", errors="replace") as log:
            logs[os.path.basename(path)] = log.read()
    rows = progress_rows(rank0_attempts(logs), params["regex"])
    result["rows"] = len(rows)
    if module.check_mode:
        module.exit_json(**result)
    table = os.path.join(params["run_dir"], "progress.csv")
    with open(table, "w", encoding="utf-8") as out:
        out.write(progress_csv(rows, groups))
    result.update(changed=True, csv=table)
    x = x_axis(rows)
    series = numeric_series(rows, x)
    msg = f"{len(rows)} progress line(s) of rank 0 in {table}"
    if rows and series:
        picture = os.path.join(params["run_dir"], "progress.png")
        why = plot(picture, rows, x, series, f"job {params['job_id']}: rank 0's progress")
        result["plot"] = "" if why else picture
        msg += f"; no plot: {why}" if why else f", plotted in {picture}"
    module.exit_json(msg=msg, **result)


if __name__ == "__main__":
    main()
