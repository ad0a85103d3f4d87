#!/usr/bin/env python3
"""Writes bench/results/gateways.md (on stdout) from bench/run's gateways.tsv.

gateways.tsv, one row per wrk run: round, setup (alone, noop, inprocess, redis), run (peak: flat
out; half: paced at half of that round's no-op peak), the rate asked (requests/s, 0 for flat
out), requests/s done, p50 and p99 in microseconds, non-2xx answers, socket errors, requests,
load average, the CPU the gateway's NGINX and the check used over the run (clock ticks, user +
system), clock ticks per second.

CPU per request depends much less than requests/s on how much of the CPU the other work on a
shared machine left to the run: the report also gives, from it, the ratio each goal would
see on a core of its own (CPU 0 holds the gateway and the check: the peak there is the inverse
of their CPU per request).

The goals (forward authentication through NGINX): the check in process >= 0.8x the no-op
endpoint's requests/s, the check on Redis >= 0.7x; the p99 added by the check over the no-op
endpoint <= 1 ms at half of the no-op endpoint's peak. (b)/(a), what forward authentication
itself costs, is reported without a goal. A ratio is taken within a round (the runs side by
side), then the rounds' median is the figure and their range the noise.
"""

import argparse
import statistics
import sys

# (setup, compared with, goal or None: reported only)
GOALS = [("inprocess", "noop", 0.8), ("redis", "noop", 0.7), ("noop", "alone", None)]
P99_SETUPS = [("inprocess", "noop"), ("redis", "noop")]
P99_GOAL_US = 1000.0
NAMES = {"alone": "(a) NGINX alone", "noop": "(b) auth_request to the no-op endpoint",
         "inprocess": "(c) the check in process", "redis": "(d) the check on Redis"}
SHORT = {"alone": "(a)", "noop": "(b)", "inprocess": "(c)", "redis": "(d)"}


def read(path):
    rows = {}
    with open(path) as f:
        for line in f:
            p = line.rstrip("\n").split("\t")
            if len(p) < 14:
                continue
            requests = max(int(p[9]), 1)
            hz = float(p[13])
            rows[(int(p[0]), p[1], p[2])] = {
                "rate": float(p[3]), "per_s": float(p[4]), "p50": float(p[5]),
                "p99": float(p[6]), "non2xx": int(p[7]), "errors": int(p[8]), "load": p[10],
                "gw_us": int(p[11]) / hz * 1e6 / requests, "ck_us": int(p[12]) / hz * 1e6 / requests}
    return rows


def spread(values, fmt):
    return fmt(statistics.median(values)), f"{fmt(min(values))} to {fmt(max(values))}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tsv")
    for opt in ("date", "load-start", "load-end", "pinned", "seconds", "connections",
                "half-connections", "cpu", "commit", "nginx", "wrk", "redis", "redis-keys"):
        ap.add_argument("--" + opt, default="unknown")
    a = ap.parse_args()
    rows = read(a.tsv)
    rounds = sorted({k[0] for k in rows})
    if not rounds:
        sys.exit("gateways_report: no rows in " + a.tsv)
    non2xx = sum(r["non2xx"] for r in rows.values())
    errors = sum(r["errors"] for r in rows.values())
    m = statistics.median

    out = []
    w = out.append
    w("# Gateways: forward authentication through NGINX, driven by wrk")
    w("")
    w(f"`bench/run --gateways` (or a full `bench/run`). {a.date}, {a.cpu}, nginx {a.nginx}, "
      f"wrk {a.wrk}, redis {a.redis}, commit {a.commit}.")
    w("")
    w(f"- Machine load (uptime) at the start: `{a.load_start}`; at the end: `{a.load_end}`. "
      "The machine is shared: every run's load is in the last table.")
    w(f"- Pinned with taskset: {a.pinned}.")
    w("- The gateway: NGINX (one worker) with `docs/gateways/nginx/ratelimit.conf`, the file the "
      "test command runs, included in the test's minimal `nginx.conf`; the addresses in the "
      "`ratelimit/*.addr` files it includes. Behind it the application: an NGINX of its own "
      "answering `hello from the application` (a real upstream, kept alive).")
    w("- (a) the same file with `auth_request off;` instead of `auth_request /.ratelimit/check;`, "
      "nothing else changed. (b) the file as shipped, its check an endpoint that answers 200 "
      "without deciding: `ratelimit_server_bench --serve http-noop`, ratelimit_server's own HTTP "
      "front (`HttpFront` on libmicrohttpd, the same options: 4 threads) with one asynchronous "
      "route `/check/` that replies 200 `OK` at once. It is the mechanism's floor: what NGINX's "
      "subrequest and the same HTTP stack cost, without reading the forwarding headers, building "
      "descriptors or counting, so (c) and (d) over (b) is what the check itself costs. (c) "
      "`ratelimit_server` with `RATELIMIT_SERVER_STORAGE=memory`; (d) `ratelimit_server` on its "
      "own redis-server. Both with `USE_STATSD=false`, one `remote_address` action and a limit "
      "never reached (10^9 per second): each request is one decision on one key, admitted "
      f"(Redis held {a.redis_keys} key(s) at the end).")
    w(f"- {len(rounds)} rounds, each: the four peaks ({a.connections} connections, flat out, "
      f"{a.seconds} s each, one wrk thread) in an order rotated by one each round, then (b), (c) "
      f"and (d) at half of that round's (b) peak ({a.half_connections} connections, each pausing "
      "between requests: Debian's wrk has no open loop, so the rate achieved is a little under "
      "the one asked, and is in the tables). A 1 s run on each setup first, not recorded.")
    w(f"- Non-2xx answers over all runs: {non2xx}; socket errors: {errors}.")
    loads = [float(r["load"].split()[0]) for r in rows.values()]
    cores = int(a.cpu.split()[0]) if a.cpu.split()[0].isdigit() else 0
    if cores and m(loads) > cores:
        w(f"- **The machine was busy**: a load average of {min(loads):.1f} to {max(loads):.1f} on "
          f"{cores} cores. The pinned processes shared their CPUs with other work, so requests/s "
          "and latencies measure the share of CPU they got as much as the setups: the ratios "
          "within a round are the usable part, and CPU per request (below), which that share "
          "disturbs less (context switches still cost more on a busy CPU), tells what each "
          "setup costs.")
    w("")

    w("## Goals (median of the rounds; the range across rounds beside it)")
    w("")
    w("| Goal | Median | Range | Met (median) |")
    w("|---|---|---|---|")
    for setup, ref, goal in GOALS:
        ratios = [rows[(r, setup, "peak")]["per_s"] / rows[(r, ref, "peak")]["per_s"]
                  for r in rounds if (r, setup, "peak") in rows and (r, ref, "peak") in rows]
        if not ratios:
            continue
        med, rng = spread(ratios, lambda x: f"{x:.2f}x")
        if goal is None:
            w(f"| {NAMES[setup]}: requests/s over {NAMES[ref]}'s (what forward authentication "
              f"costs; no goal) | {med} | {rng} | - |")
            continue
        met = "yes" if m(ratios) >= goal else "no"
        w(f"| {NAMES[setup]}: requests/s >= {goal}x {NAMES[ref]}'s | {med} | {rng} | {met} |")
    for setup, ref in P99_SETUPS:
        added = [rows[(r, setup, "half")]["p99"] - rows[(r, ref, "half")]["p99"]
                 for r in rounds if (r, setup, "half") in rows and (r, ref, "half") in rows]
        if not added:
            continue
        med, rng = spread(added, lambda x: f"{x / 1000:+.2f} ms")
        met = "yes" if m(added) <= P99_GOAL_US else "no"
        w(f"| {NAMES[setup]}: p99 added over {SHORT[ref]} at half of {SHORT[ref]}'s peak "
          f"<= 1 ms | {med} | {rng} | {met} |")
    w("")

    w("## CPU per request on the gateway's CPU (peak runs, median of the rounds)")
    w("")
    w("CPU 0 runs the gateway's NGINX and the check: on a core of their own, the peak is "
      "1 / (their CPU per request), so the ratio of CPU per request estimates each goal's "
      "ratio without the other work on the machine.")
    w("")
    w("| Setup | NGINX (us/request) | Check (us/request) | Both (us/request) |")
    w("|---|---|---|---|")
    for setup in ("alone", "noop", "inprocess", "redis"):
        peaks = [rows[(r, setup, "peak")] for r in rounds if (r, setup, "peak") in rows]
        if not peaks:
            continue
        w(f"| {NAMES[setup]} | {m([p['gw_us'] for p in peaks]):.1f} | "
          f"{m([p['ck_us'] for p in peaks]):.1f} | "
          f"{m([p['gw_us'] + p['ck_us'] for p in peaks]):.1f} |")
    w("")
    w("| Ratio on a core of its own, from CPU per request | Median | Range | Goal | Met |")
    w("|---|---|---|---|---|")
    for setup, ref, goal in GOALS:
        est = [(rows[(r, ref, "peak")]["gw_us"] + rows[(r, ref, "peak")]["ck_us"]) /
               (rows[(r, setup, "peak")]["gw_us"] + rows[(r, setup, "peak")]["ck_us"])
               for r in rounds if (r, setup, "peak") in rows and (r, ref, "peak") in rows]
        if not est:
            continue
        med, rng = spread(est, lambda x: f"{x:.2f}x")
        met = "-" if goal is None else ("yes" if m(est) >= goal else "no")
        w(f"| {SHORT[setup]} over {SHORT[ref]} | {med} | {rng} | "
          f"{'-' if goal is None else f'>= {goal}x'} | {met} |")
    w("")

    w("## Medians per setup")
    w("")
    w("| Setup | Peak requests/s | Range | p50 / p99 at peak (ms) | Half: rate asked | "
      "Half: rate done | p50 / p99 at half (ms) |")
    w("|---|---|---|---|---|---|---|")
    for setup in ("alone", "noop", "inprocess", "redis"):
        peaks = [rows[(r, setup, "peak")] for r in rounds if (r, setup, "peak") in rows]
        halves = [rows[(r, setup, "half")] for r in rounds if (r, setup, "half") in rows]
        if not peaks:
            continue
        med, rng = spread([p["per_s"] for p in peaks], lambda x: f"{x:,.0f}")
        half = "- | - | -"
        if halves:
            half = (f"{m([h['rate'] for h in halves]):,.0f} | {m([h['per_s'] for h in halves]):,.0f}"
                    f" | {m([h['p50'] for h in halves]) / 1000:.2f} / "
                    f"{m([h['p99'] for h in halves]) / 1000:.2f}")
        w(f"| {NAMES[setup]} | {med} | {rng} | {m([p['p50'] for p in peaks]) / 1000:.2f} / "
          f"{m([p['p99'] for p in peaks]) / 1000:.2f} | {half} |")
    w("")

    w("## Every run, in the order run")
    w("")
    w("| Round | Setup | Run | Rate asked | Requests/s | p50 (ms) | p99 (ms) | Non-2xx | "
      "Socket errors | CPU 0 (us/request) | Load |")
    w("|---|---|---|---|---|---|---|---|---|---|---|")
    for (rnd, setup, run), r in rows.items():
        asked = "flat out" if r["rate"] == 0 else f"{r['rate']:,.0f}"
        w(f"| {rnd} | {SHORT[setup]} {setup} | {run} | {asked} | {r['per_s']:,.0f} | "
          f"{r['p50'] / 1000:.2f} | {r['p99'] / 1000:.2f} | {r['non2xx']} | {r['errors']} | "
          f"{r['gw_us'] + r['ck_us']:.1f} | {r['load']} |")
    print("\n".join(out))


if __name__ == "__main__":
    main()
