#!/usr/bin/env python3
"""The monitoring goal from bench/monitor_bench's JSON (bench/run --monitor): Markdown on stdout.

usage: monitor_report.py RESULTS.json LOAD_START LOAD_END COMMIT

For each clock, the median CPU time per decision of every variant over the repetitions (each
repetition's value listed), and the ratio of medians to NoListener; the goal is the
CountingListener ratio <= 1.15. The spread of a variant's repetitions is the noise to read the
ratios against.
"""
import json
import statistics
import sys

GOAL = 1.15


def main() -> int:
    path, load_start, load_end, commit = sys.argv[1:5]
    with open(path) as f:
        data = json.load(f)
    runs: dict[str, list[float]] = {}
    for b in data["benchmarks"]:
        if b.get("run_type") != "iteration":
            continue
        name = b["run_name"] if "run_name" in b else b["name"]
        runs.setdefault(name, []).append(float(b["cpu_time"]))  # ns (the default time unit)
    ctx = data.get("context", {})
    print("# Monitoring: bench/run --monitor\n")
    print(f"Commit {commit}, {ctx.get('date', '?')}, {ctx.get('num_cpus', '?')} CPUs, "
          f"load average {load_start} at the start and {load_end} at the end. g++ -O2, "
          "Google Benchmark, repetitions randomly interleaved; CPU time per decision, one key, "
          "always admitted (token bucket of 10^9).\n")
    print("| clock | variant | median ns | repetitions (ns) | ratio to NoListener |")
    print("|---|---|---:|---|---:|")
    verdicts = []
    for clock in ("SteadyClock", "ManualClock"):
        base_name = f"BM_Monitor_TokenBucket_{clock}_NoListener"
        if base_name not in runs:
            continue
        base = statistics.median(runs[base_name])
        for variant in ("NoListener", "CountingListener", "Prometheus", "Shadow"):
            name = f"BM_Monitor_TokenBucket_{clock}_{variant}"
            if name not in runs:
                continue
            med = statistics.median(runs[name])
            reps = ", ".join(f"{v:.1f}" for v in runs[name])
            ratio = med / base
            print(f"| {clock} | {variant} | {med:.1f} | {reps} | {ratio:.2f}x |")
            if variant == "CountingListener":
                verdicts.append((clock, ratio))
    print()
    for clock, ratio in verdicts:
        status = "met" if ratio <= GOAL else "missed"
        print(f"- Goal (counting listener at most {GOAL}x none), {clock}: {ratio:.2f}x, {status}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
