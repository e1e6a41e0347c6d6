#!/usr/bin/env python3
"""Plots for docs/benchmarks.md from gpu-check's combined JSON (or single lanes_bench / gpu_bench JSON files).

    python tools/plot_benchmarks.py OUT/gpu_check.json [more.json ...] [--out docs/img] [--prefix gpu_]

Writes, per lanes_bench result, `<prefix>lanes_<name>.png` (tokens/s vs streams, plain vs drafted, log-2 stream
axis; speedup on a second panel with the 1x and 3x lines), and, when any gpu_bench / cpu_bench result carries
floor ratios, `<prefix>floor_ratio.png` (decode tok/s as a fraction of the memory floor, prefill as a fraction of
the GEMM rate, with issue 8's bars at 80 % and 50 %). Needs matplotlib (e.g. `.venv-tools`).
"""
import argparse
import json
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load_results(paths):
    """{name: result} from combined gpu-check JSON files (their "results") or single bench JSON files."""
    results = {}
    for path in paths:
        with open(path) as handle:
            data = json.load(handle)
        if isinstance(data, dict) and "results" in data and "steps" in data:
            meta = {key: data.get(key) for key in ("commit", "machine", "device")}
            for name, result in data["results"].items():
                if isinstance(result, dict):
                    result.setdefault("_meta", meta)
                    results[name] = result
        else:
            results[os.path.splitext(os.path.basename(path))[0]] = data
    return results


def plot_lanes(name, bench, out_path):
    rows = sorted(bench["rows"], key=lambda row: row["streams"])
    streams = [row["streams"] for row in rows]
    plain = [row.get("plain_decode_tokens_per_s", row.get("plain_tokens_per_s", 0)) for row in rows]
    drafted = [row.get("drafted_decode_tokens_per_s", row.get("drafted_tokens_per_s", 0)) for row in rows]
    speedup = [d / p if p else 0 for p, d in zip(plain, drafted)]
    figure, (rate_axis, ratio_axis) = plt.subplots(1, 2, figsize=(10, 4))
    rate_axis.plot(streams, plain, "o-", label="plain")
    rate_axis.plot(streams, drafted, "s-", label="drafted")
    rate_axis.set_xscale("log", base=2)
    rate_axis.set_yscale("log")
    rate_axis.set_xticks(streams, [str(s) for s in streams])
    rate_axis.set_xlabel("concurrent streams")
    rate_axis.set_ylabel("decode tokens/s (all streams)")
    rate_axis.grid(True, which="both", alpha=0.3)
    rate_axis.legend()
    ratio_axis.plot(streams, speedup, "s-", color="tab:green")
    ratio_axis.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="plain (1x)")
    ratio_axis.axhline(3.0, color="tab:red", linestyle=":", linewidth=1, label="issue 8 bar at 1 stream (3x)")
    ratio_axis.set_xscale("log", base=2)
    ratio_axis.set_xticks(streams, [str(s) for s in streams])
    ratio_axis.set_ylim(bottom=0)
    ratio_axis.set_xlabel("concurrent streams")
    ratio_axis.set_ylabel("drafted / plain")
    ratio_axis.grid(True, alpha=0.3)
    ratio_axis.legend(loc="upper right", fontsize=8)
    accept = bench.get("synthetic_acceptance") or {}
    meta = bench.get("_meta", {})
    title = "%s on %s: %s tokens/stream, %s" % (os.path.basename(str(bench.get("model", name))),
                                              bench.get("device", "?"), bench.get("tokens_per_stream", "?"),
                                              "sampled" if bench.get("sampled") else "greedy")
    if accept:
        title += ", synthetic acceptance %.2f" % accept["mean"]
    subtitle = "%s, commit %s" % (str(meta.get("machine") or bench.get("machine", {}).get("given", ""))[:80],
                                  str(meta.get("commit") or bench.get("commit", "?"))[:10])
    figure.suptitle(title + "\n" + subtitle, fontsize=9)
    figure.tight_layout()
    figure.savefig(out_path, dpi=110)
    plt.close(figure)


FLOOR_KEYS = re.compile(r"(fraction_of_floor|of_floor|floor_ratio|floor_fraction)$")
GEMM_KEYS = re.compile(r"(fraction_of_gemm|of_gemm|gemm_ratio|gemm_fraction)$")


def find_ratios(value, pattern, path=""):
    """(path, ratio) for every numeric entry whose key matches `pattern`, anywhere in the JSON."""
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            child = "%s/%s" % (path, key) if path else str(key)
            if isinstance(item, (int, float)) and not isinstance(item, bool) and pattern.search(str(key)):
                found.append((child, float(item)))
            else:
                found.extend(find_ratios(item, pattern, child))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found.extend(find_ratios(item, pattern, "%s[%d]" % (path, index)))
    return found


def derived_ratios(bench):
    """gpu_bench's times as ratios: floor_ms / decode_ms (decode vs the memory floor) and cublas_prefill_ms /
    prefill_ms (prefill vs the cuBLAS GEMM rate on the model's shapes)."""
    floor, gemm = [], []
    if isinstance(bench, dict):
        if bench.get("decode_ms") and bench.get("floor_ms"):
            floor.append(("decode vs floor", bench["floor_ms"] / bench["decode_ms"]))
        if bench.get("prefill_ms") and bench.get("cublas_prefill_ms"):
            gemm.append(("prefill %s vs cuBLAS" % bench.get("prefill_tokens", ""),
                         bench["cublas_prefill_ms"] / bench["prefill_ms"]))
    return floor, gemm


def plot_floor(benches, out_path):
    labels, floor, gemm = [], [], []
    for name, bench in benches.items():
        derived_floor, derived_gemm = derived_ratios(bench)
        for path, ratio in find_ratios(bench, FLOOR_KEYS) + derived_floor:
            labels.append("%s\n%s" % (name, path)), floor.append(ratio), gemm.append(None)
        for path, ratio in find_ratios(bench, GEMM_KEYS) + derived_gemm:
            labels.append("%s\n%s" % (name, path)), floor.append(None), gemm.append(ratio)
    if not labels:
        return False
    figure, axis = plt.subplots(figsize=(max(5, 1.3 * len(labels)), 4))
    positions = range(len(labels))
    for values, color, label in ((floor, "tab:blue", "decode / memory floor"),
                                 (gemm, "tab:orange", "prefill / GEMM rate")):
        if any(v is not None for v in values):
            axis.bar([p for p, v in zip(positions, values) if v is not None], [v for v in values if v is not None],
                     color=color, label=label)
    axis.axhline(0.8, color="tab:blue", linestyle=":", linewidth=1, label="80 % bar (decode)")
    axis.axhline(0.5, color="tab:orange", linestyle=":", linewidth=1, label="50 % bar (prefill)")
    axis.set_xticks(list(positions), labels, fontsize=7)
    axis.set_ylim(0, max(1.05, max(v for v in floor + gemm if v is not None) * 1.1))
    axis.set_ylabel("fraction of the ceiling measured in the same run")
    axis.legend(fontsize=7)
    axis.grid(True, axis="y", alpha=0.3)
    figure.tight_layout()
    figure.savefig(out_path, dpi=110)
    plt.close(figure)
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="+", help="gpu_check.json, lanes_bench or gpu_bench JSON files")
    parser.add_argument("--out", default="docs/img", help="folder for the PNGs (default docs/img)")
    parser.add_argument("--prefix", default="gpu_", help="file name prefix (default gpu_)")
    args = parser.parse_args()
    results = load_results(args.inputs)
    os.makedirs(args.out, exist_ok=True)
    written = []
    for name, result in results.items():
        if isinstance(result, dict) and result.get("bench") == "lanes" and result.get("rows"):
            path = os.path.join(args.out, "%slanes_%s.png" % (args.prefix, re.sub(r"[^A-Za-z0-9_.-]", "_", name)))
            plot_lanes(name, result, path)
            written.append(path)
    floor_benches = {name: result for name, result in results.items() if name.startswith(("gpu_bench", "cpu_bench"))
                     or (isinstance(result, dict) and result.get("bench") == "gpu")}
    floor_path = os.path.join(args.out, "%sfloor_ratio.png" % args.prefix)
    if plot_floor(floor_benches, floor_path):
        written.append(floor_path)
    for path in written:
        print("wrote", path)
    if not written:
        print("no lanes or floor results in", ", ".join(args.inputs), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
