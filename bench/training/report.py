"""The experiment's outputs: target checks, a Markdown table, and a PNG plot.

Everything here reads the result dict that run_train_bench.py writes as JSON, so a
report can be re-made from a saved JSON file (``python -m bench.training.report F``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

LABELS = {
    "local": "local disk",
    "boto3": "boto3 in the dataset",
    "s3fs": "s3fs-fuse",
    "rclone": "rclone mount (vfs full)",
    "fusecache": "fusecache cold",
    "fusecache-prefetch": "fusecache after prefetchd warm",
    "fusecache-group": "fusecache, pod on an unwarmed node of a warmed group",
    "fusecache-group-agent": "fusecache, the same with its node's agent warming from the "
                             "group as the pod starts",
}
SHORT = {"local": "local\ndisk", "boto3": "boto3", "s3fs": "s3fs", "rclone": "rclone",
         "fusecache": "fusecache\ncold", "fusecache-prefetch": "fusecache\nprefetched"}


def _epoch(res: dict, contender: str, dataset: str, epoch: int) -> dict | None:
    runs = res.get("contenders", {}).get(contender, {}).get("datasets", {}).get(dataset)
    if not runs or len(runs["epochs"]) <= epoch:
        return None
    return runs["epochs"][epoch]


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def targets(res: dict) -> list[dict]:
    """The issue's three targets, each with the figures it was computed from."""
    out = []
    for ds in res["datasets"]:
        pre, loc = _epoch(res, "fusecache-prefetch", ds, 0), _epoch(res, "local", ds, 0)
        if pre and loc:
            r = _ratio(pre["accelerator_utilization"], loc["accelerator_utilization"])
            out.append({"dataset": ds, "target": "prefetched epoch-1 utilisation >= 0.9x "
                        "local disk's", "value": r, "met": r is not None and r >= 0.9})
        for c, what in (("fusecache-group", "unwarmed node, warmed peer"),
                        ("fusecache-group-agent", "the same, agent warming from the group")):
            grp = _epoch(res, c, ds, 0)
            if grp and loc:
                r = _ratio(grp["accelerator_utilization"], loc["accelerator_utilization"])
                out.append({"dataset": ds, "target": f"group ({what}) epoch-1 "
                            "utilisation >= 0.9x local disk's", "value": r,
                            "met": r is not None and r >= 0.9})
        cold2 = _epoch(res, "fusecache", ds, 1)
        loc_walls = [e["wall_s"] for e in
                     (_epoch(res, "local", ds, 0), _epoch(res, "local", ds, 1)) if e]
        if cold2 and loc_walls:
            best = min(loc_walls)
            r = _ratio(cold2["wall_s"], best)
            out.append({"dataset": ds, "target": "fusecache epoch-2 time within 10% of "
                        "local disk's best epoch", "value": r,
                        "met": r is not None and r <= 1.1})
    if "files" in res["datasets"]:
        pre = _epoch(res, "fusecache-prefetch", "files", 0)
        for peer in ("s3fs", "rclone"):
            other = _epoch(res, peer, "files", 0)
            if pre and other:
                r = _ratio(pre["samples_per_s"], other["samples_per_s"])
                out.append({"dataset": "files", "target": f"prefetched epoch-1 samples/s "
                            f">= 3x {peer}'s epoch 1", "value": r,
                            "met": r is not None and r >= 3})
    return out


def markdown(res: dict) -> str:
    s = res["settings"]
    lines = [
        f"## Training-data experiment ({res['started']})",
        "",
        f"Link: {s['link']}. Loader: {s['loader']}, {s['workers']} workers, batch "
        f"{s['batch_size']}, prefetch factor {s['prefetch_factor']}. Accelerator: "
        f"{s['accelerator']} ({s['accelerator_why']}). Page cache dropped before each "
        "contender's epoch 1, not between epochs. Local disk read-ahead: "
        f"{s.get('disk_readahead_kb')} KiB"
        + (f" (set for this run; the machine's is {s['disk_readahead_kb_machine']} KiB)"
           if s.get("disk_readahead_kb_machine") is not None else "") + ".",
        "",
    ]
    for ds in res["datasets"]:
        d = res["dataset_info"][ds]
        what = (f"{d['samples']} files, {d['bytes'] / 1e6:.0f} MB" if d["kind"] == "files"
                else f"{d['shards']} shards ({d['samples']} samples), "
                     f"{d['bytes'] / 1e6:.0f} MB")
        lines += [f"### {ds}: {what}", "",
                  "| contender | epoch | time s | samples/s | MB/s | accel. util. "
                  "| data stall s | 1st batch s | mount CPU s | machine CPU s |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for c, cres in res["contenders"].items():
            runs = cres.get("datasets", {}).get(ds)
            if not runs:
                continue
            for e in runs["epochs"]:
                util = f"{e['accelerator_utilization']:.2f}"
                if e.get("nvml_util_pct") is not None:
                    util += f" (NVML {e['nvml_util_pct']:.0f}%)"
                lines.append(
                    f"| {LABELS.get(c, c)} | {e['epoch'] + 1} | {e['wall_s']:.2f} | "
                    f"{e['samples_per_s']:.0f} | {e['mb_per_s']:.0f} | {util} | "
                    f"{e['stall_s']:.2f} | {e['first_batch_s']:.2f} | "
                    f"{e.get('mount_cpu_s', '')} | {e.get('machine_cpu_s', '')} |")
        lines.append("")
    pre = res["contenders"].get("fusecache-prefetch", {})
    if pre.get("warm"):
        w = pre["warm"]
        lines += [f"prefetchd warm (before the mount, not in any epoch): {w['seconds']:.1f} s "
                  f"for {w['bytes'] / 1e6:.0f} MB; the mount then fetched "
                  f"{pre.get('mount_s3_bytes', 0) / 1e6:.1f} MB from S3.", ""]
    tg = res.get("targets", [])
    if tg:
        lines += ["| target | dataset | value | met |", "|---|---|---|---|"]
        for t in tg:
            v = "n/a" if t["value"] is None else f"{t['value']:.2f}"
            lines.append(f"| {t['target']} | {t['dataset']} | {v} | "
                         f"{'yes' if t['met'] else 'NO'} |")
        lines.append("")
    return "\n".join(lines)


def plot(res: dict, path: Path) -> None:
    """Utilisation and epoch time per contender, one row of panels per dataset."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dss = res["datasets"]
    fig, axes = plt.subplots(len(dss), 2, figsize=(13, 4.2 * len(dss)), squeeze=False)
    for row, ds in enumerate(dss):
        names, util, wall = [], [[], []], [[], []]
        for c, cres in res["contenders"].items():
            runs = cres.get("datasets", {}).get(ds)
            if not runs:
                continue
            names.append(SHORT.get(c, c))
            for e in (0, 1):
                ep = runs["epochs"][e] if len(runs["epochs"]) > e else None
                util[e].append(ep["accelerator_utilization"] if ep else 0)
                wall[e].append(ep["wall_s"] if ep else 0)
        x = range(len(names))
        for col, (vals, title) in enumerate(((util, "accelerator utilisation"),
                                             (wall, "epoch time (s)"))):
            ax = axes[row][col]
            for e, off in ((0, -0.2), (1, 0.2)):
                ax.bar([i + off for i in x], vals[e], width=0.4, label=f"epoch {e + 1}")
            ax.set_xticks(list(x))
            ax.set_xticklabels(names, fontsize=8)
            ax.set_title(f"{ds}: {title}")
            top = 1.0 if col == 0 else max([*vals[0], *vals[1], 1e-9])
            ax.set_ylim(0, top * 1.18)  # room for the legend above the bars
            ax.legend(fontsize=8, loc="upper center", ncol=2)
    fig.suptitle(f"fusecache training-data experiment, {res['settings']['link']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m bench.training.report RESULT.json", file=sys.stderr)
        return 2
    res = json.loads(Path(args[0]).read_text())
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
