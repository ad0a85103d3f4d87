#!/usr/bin/env python3
"""Writes bench/results/server.md (on stdout) from bench/run's server.tsv.

server.tsv, one row per client run: round, server (noop, inprocess, statsdoff, statsd,
noopshared, redisfloor, redis, memcachefloor, memcache, and floor-<server> for inprocess,
redisfloor, redis, memcachefloor and memcache), run (peak: flat out; half:
open loop at half that server's peak), the rate asked (calls/s, 0 for flat out), calls/s done,
p50 and p99 in microseconds, errors, load average. noopshared is the no-op server in the Redis
path's layout (redis-server alone on one CPU, server and client on the other); redisfloor is
the Redis path's floor (each call's INCRBY and EXPIRE sent with hiredis's async API, pipelined);
memcachefloor the memcache path's floor (each call's get and incr, add on a miss, pipelined on
one connection, answered on the get's reply), in the same layout with memcached alone.

The server goals: in process >= 0.9x the no-op server's calls/s; Redis >= 0.8x the no-op server
in its layout and >= 0.9x the Redis path's floor; the p99 added over the floor (the no-op server
at the same rate) <= 1 ms at half of the server's own peak. Memcache the same: >= 0.8x the no-op
server in its layout, >= 0.9x the memcache path's floor, p99 added <= 1 ms. A ratio is taken
within a round (the runs side by side), then the rounds' median is the figure and their range
the noise.

The stats goal: in process with the stats as ratelimit_server sets them, statsd on (USE_STATSD
over TCP to a daemon that reads and discards) >= 0.95x the same with statsd off (statsdoff:
USE_STATSD=false, our /metrics still fed), runs side by side in each round.
"""

import argparse
import statistics
import sys

# (server, compared with, goal or None: reported only)
GOALS = [("inprocess", "noop", 0.9), ("redis", "noopshared", 0.8), ("redis", "redisfloor", 0.9),
         ("memcache", "noopshared", 0.8), ("memcache", "memcachefloor", 0.9),
         ("statsd", "statsdoff", 0.95)]
P99_SERVERS = ["inprocess", "redis", "memcache"]
P99_GOAL_US = 1000.0
NAMES = {"noop": "no-op gRPC server (floor)", "inprocess": "ratelimit_server, in process",
         "noopshared": "no-op gRPC server, Redis and memcache layout",
         "redisfloor": "Redis path's floor (INCRBY+EXPIRE, hiredis async)",
         "memcachefloor": "memcache path's floor (get, incr, add; pipelined)",
         "redis": "ratelimit_server, Redis", "memcache": "ratelimit_server, memcache",
         "statsdoff": "ratelimit_server in process, its stats with USE_STATSD=false",
         "statsd": "ratelimit_server in process, statsd on (TCP, a daemon that discards)"}


def read(path):
    rows = {}
    with open(path) as f:
        for line in f:
            p = line.rstrip("\n").split("\t")
            if len(p) < 9:
                continue
            rnd, server, run = int(p[0]), p[1], p[2]
            rows[(rnd, server, run)] = {
                "rate": float(p[3]), "per_s": float(p[4]), "p50": float(p[5]),
                "p99": float(p[6]), "errors": int(p[7]), "load": p[8]}
    return rows


def spread(values, fmt):
    if not values:
        return "n/a", "n/a"
    return fmt(statistics.median(values)), f"{fmt(min(values))} to {fmt(max(values))}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tsv")
    for opt in ("date", "load-start", "load-end", "pinned", "seconds", "cpu", "commit", "grpc",
                "redis"):
        ap.add_argument("--" + opt, default="unknown")
    a = ap.parse_args()
    rows = read(a.tsv)
    rounds = sorted({k[0] for k in rows})
    if not rounds:
        sys.exit("server_report: no rows in " + a.tsv)
    errors = sum(r["errors"] for r in rows.values())

    out = []
    w = out.append
    w("# gRPC server: ShouldRateLimit beside a no-op gRPC server")
    w("")
    w("`bench/run --server` (or a full `bench/run`): server/bench/server_bench.cpp. "
      f"{a.date}, {a.cpu}, grpc++ {a.grpc}, redis {a.redis}, commit {a.commit}.")
    w("")
    w(f"- Machine load (uptime) at the start: `{a.load_start}`; at the end: `{a.load_end}`.")
    w(f"- Pinned with taskset: {a.pinned}.")
    w(f"- {len(rounds)} rounds, each: no-op, in process, in process with the stats as the "
      "server sets them (statsd off, then on), no-op in the Redis layout, the Redis "
      "path's floor, Redis, the memcache path's floor, memcache, one process per server; "
      f"{a.seconds} s per client run, 64 calls in flight, one descriptor per call "
      "(1,000 client values, a limit never reached).")
    w("- Peak: flat out. Half: open loop at half of that server's own peak. Floor: the no-op "
      "server at that same rate, run right after.")
    w(f"- Errors over all runs: {errors}.")
    w("")

    w("## Goals (median of the rounds; the range across rounds beside it)")
    w("")
    w("| Goal | Median | Range | Met (median) |")
    w("|---|---|---|---|")
    for server, ref, goal in GOALS:
        ratios = [rows[(r, server, "peak")]["per_s"] / rows[(r, ref, "peak")]["per_s"]
                  for r in rounds if (r, server, "peak") in rows and (r, ref, "peak") in rows]
        if not ratios:
            continue
        med, rng = spread(ratios, lambda x: f"{x:.2f}x")
        if goal is None:
            w(f"| {NAMES[server]}: calls/s over the {NAMES[ref]}'s (no goal) | {med} | {rng} | - |")
            continue
        met = "yes" if statistics.median(ratios) >= goal else "no"
        w(f"| {NAMES[server]}: calls/s >= {goal}x the {NAMES[ref]}'s | {med} | {rng} | {met} |")
    for server in P99_SERVERS:
        added = [rows[(r, server, "half")]["p99"] - rows[(r, "floor-" + server, "half")]["p99"]
                 for r in rounds
                 if (r, server, "half") in rows and (r, "floor-" + server, "half") in rows]
        if not added:
            continue
        med, rng = spread(added, lambda x: f"{x / 1000:+.2f} ms")
        met = "yes" if added and statistics.median(added) <= P99_GOAL_US else "no"
        w(f"| {NAMES[server]}: p99 added over the floor at half its peak <= 1 ms | {med} | "
          f"{rng} | {met} |")
    w("")

    w("## Medians per server")
    w("")
    w("| Server | Peak calls/s | Range | p50 / p99 at peak (ms) | Half-peak rate | "
      "p50 / p99 at half (ms) | Floor p99 at that rate (ms) |")
    w("|---|---|---|---|---|---|---|")
    for server in ("noop", "inprocess", "statsdoff", "statsd", "noopshared", "redisfloor",
                   "redis", "memcachefloor", "memcache"):
        peaks = [rows[(r, server, "peak")] for r in rounds if (r, server, "peak") in rows]
        halves = [rows[(r, server, "half")] for r in rounds if (r, server, "half") in rows]
        floors = [rows[(r, "floor-" + server, "half")] for r in rounds
                  if (r, "floor-" + server, "half") in rows]
        if not peaks:
            continue
        med, rng = spread([p["per_s"] for p in peaks], lambda x: f"{x:,.0f}")
        m = statistics.median
        floor = f"{m([f['p99'] for f in floors]) / 1000:.2f}" if floors else "-"
        w(f"| {NAMES[server]} | {med} | {rng} | {m([p['p50'] for p in peaks]) / 1000:.2f} / "
          f"{m([p['p99'] for p in peaks]) / 1000:.2f} | {m([h['rate'] for h in halves]):,.0f} | "
          f"{m([h['p50'] for h in halves]) / 1000:.2f} / {m([h['p99'] for h in halves]) / 1000:.2f}"
          f" | {floor} |")
    w("")

    w("## Every run, in the order run")
    w("")
    w("| Round | Server | Run | Rate asked | Calls/s | p50 (ms) | p99 (ms) | Errors | Load |")
    w("|---|---|---|---|---|---|---|---|---|")
    for (rnd, server, run), r in rows.items():
        asked = "flat out" if r["rate"] == 0 else f"{r['rate']:,.0f}"
        w(f"| {rnd} | {server} | {run} | {asked} | {r['per_s']:,.0f} | {r['p50'] / 1000:.2f} | "
          f"{r['p99'] / 1000:.2f} | {r['errors']} | {r['load']} |")
    print("\n".join(out))


if __name__ == "__main__":
    main()
