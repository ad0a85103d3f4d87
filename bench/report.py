#!/usr/bin/env python3
"""Turns bench/run's raw results into bench/results/latest.{md,json,png}.

    python3 bench/report.py RAW_DIR OUT_DIR
    python3 bench/report.py --redis-cost RAW_DIR OUT_DIR
    python3 bench/report.py --pipelining RAW_DIR OUT_DIR
    python3 bench/report.py --inprocess RAW_DIR OUT_DIR

RAW_DIR holds meta.env, inprocess_*.json and redis.json (Google Benchmark JSON),
redis_benchmark.csv (bench/run's lines: c,P,n,cpu_before,cpu_after,<redis-benchmark CSV row>)
redis_cost.json (bench/redis_cost's runs) and pipelining.tsv (bench/run's pipelining rounds).
The first form writes latest.{md,json,png} (and redis_cost.md, pipelining.md when their data is
there); --redis-cost writes only OUT_DIR/redis_cost.md and --pipelining only
OUT_DIR/pipelining.md, --inprocess only OUT_DIR/inprocess.md (the in-process sections and issue
19's goals, from inprocess_*.json alone), and each prints what it wrote.
Python 3 standard library only; the chart is drawn by gnuplot when it is installed.
"""

import csv
import glob
import io
import json
import os
import re
import shutil
import subprocess
import sys

ALGORITHMS = ["TokenBucket", "LeakyBucket", "FixedWindow", "SlidingCounter", "SlidingLog"]


def read_meta(raw):
    meta = {}
    with open(os.path.join(raw, "meta.env")) as f:
        for line in f:
            key, _, value = line.rstrip("\n").partition("=")
            meta[key] = value
    return meta


def base_name(b):
    """The benchmark's name without Google Benchmark's /repeats, /iterations, /real_time parts
    (threads and arguments are kept: /threads:8, /16)."""
    name = b.get("run_name", b["name"])
    parts = [p for p in name.split("/") if not re.match(r"(repeats|iterations|real_time|min_time)", p)]
    return "/".join(parts)


# The memory floors bench/run also times in each 1,000,000-key benchmark's own process.
MEMORY_FLOORS = ["BM_Floor_MemoryLatency", "BM_Floor_MemoryLatencyClock"]
# The CAS floor each two-thread benchmark's threads time just before it (counter floor_ns).
TWO_THREAD_FLOOR = "BM_Floor_AtomicCasTwoThreads/threads:2"


def read_benchmarks(paths):
    """name -> the benchmark entry (the median when repetitions were aggregated). Floors timed
    beside a benchmark are kept on its entry as own_floors (floor's name -> ns), not as the
    run's floors: the memory floors a 1,000,000-key benchmark's process (inprocess_mk_*.json)
    also timed, and a two-thread benchmark's CAS floor (its counter floor_ns)."""
    out = {}
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        own_process = os.path.basename(path).startswith("inprocess_mk_")
        own_floors, names = {}, []
        for b in data.get("benchmarks", []):
            name = base_name(b)
            if b.get("error_occurred"):
                out[name] = {"error": b.get("error_message", "error")}
                continue
            if b.get("run_type") == "aggregate" and b.get("aggregate_name") == "cv":
                # The repetitions' coefficient of variation (stddev / mean): the noise.
                out.setdefault(name + "#cv", b)
                continue
            if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
                continue
            if own_process and name in MEMORY_FLOORS:
                own_floors[name] = ns_per_item(b)
                continue
            out[name] = b
            names.append(name)
        for name in names:
            floors = dict(own_floors)
            if out[name].get("floor_ns"):
                floors[TWO_THREAD_FLOOR] = out[name]["floor_ns"]
            out[name]["own_floors"] = floors
    return out


def own_floor(table, name, floor):
    """`floor`'s ns as timed beside `name` when it was (see read_benchmarks), else the run's."""
    b = table.get(name)
    if b and "error" not in b and b.get("own_floors", {}).get(floor):
        return b["own_floors"][floor]
    f = table.get(floor)
    return ns_per_item(f) if f and "error" not in f else None


def ns_per_item(b):
    ips = b.get("items_per_second")
    return 1e9 / ips if ips else None


def noise(table, name):
    """The repetitions' spread of `name`'s ns/decision as a fraction (their coefficient of
    variation), or None when it ran once."""
    b = table.get(name + "#cv")
    if not b:
        return None
    v = b.get("items_per_second")
    return v if v is not None else b.get("cpu_time")


def issue19_goals(inproc):
    """The in-process floor goals, each as (goal, measured, status): figures side by side from one run,
    ratios of medians, the noise of a ratio the root sum of squares of both figures'
    coefficients of variation over the repetitions."""
    def ns(name):
        b = inproc.get(name)
        return ns_per_item(b) if b and "error" not in b else None

    def pm(*names):
        cvs = [noise(inproc, n) for n in names]
        if any(c is None for c in cvs):
            return ""
        return f" ±{100 * sum(c * c for c in cvs) ** 0.5:.0f} %"

    goals = []

    def goal(text, measured, ok):
        goals.append((text, measured, "–" if ok is None else ("met" if ok else "missed")))

    cas = "BM_Floor_AtomicCas"
    for algo in ["TokenBucket", "LeakyBucket", "FixedWindow"]:
        name = f"BM_{algo}_InMemory_NoKey"
        v, f = ns(name), ns(cas)
        d = v - f if v is not None and f is not None else None
        goal(f"{algo}, no key, one thread: at most AtomicCas + 10 ns",
             f"{fmt(v)}{pm(name)} ns = {fmt(f)}{pm(cas)} + {fmt(d)} ns",
             None if d is None else d <= 10)
    naive = "BM_Naive_UnorderedMapMutex_OneKey"
    for algo, bound in [("TokenBucket", 0.7), ("LeakyBucket", 0.7), ("FixedWindow", 0.7),
                        ("SlidingCounter", 0.9)]:
        name = f"BM_{algo}_InMemory_OneKeyAdmitted"
        r = ratio(ns(name), ns(naive))
        goal(f"{algo}, one hot key, one thread: at most {bound:g}x unordered_map + std::mutex",
             f"{fmt(ns(name))} / {fmt(ns(naive))} ns = {fmt(r, 2)}x{pm(name, naive)}",
             None if r is None else r <= bound)
    for algo in ["TokenBucket", "LeakyBucket", "FixedWindow", "SlidingCounter"]:
        name = f"BM_{algo}_InMemory_OneKeyBound"
        r = ratio(ns(name), ns(naive))
        if r is not None:
            goal(f"{algo}, the same hot key bound once (`bind_key`: not hashed per decision), "
                 f"for reference",
                 f"{fmt(ns(name))} / {fmt(ns(naive))} ns = {fmt(r, 2)}x{pm(name, naive)}", None)
    cas2 = TWO_THREAD_FLOOR
    # A key whose slot's written words lie in one cache line, and (40-byte slots, 3 positions
    # of 8) one whose lie in two: both lines then move between the cores at each decision.
    for algo in ["TokenBucket", "LeakyBucket", "FixedWindow", "SlidingCounter"]:
        for variant, where in [("", "slot in one cache line"),
                               ("TwoLines", "slot across two lines, 3 of 8 positions")]:
            name = f"BM_{algo}_InMemory_OneKeyTwoThreads{variant}/threads:2"
            if variant and name not in inproc:
                continue  # 32-byte slots never span two lines
            # The floor its own threads timed just before it: this VM switches between a fast
            # and a slow mode for minutes, and the run's floor may have been timed in the other.
            f = own_floor(inproc, name, cas2)
            r = ratio(ns(name), f)
            goal(f"{algo}, one key, two threads ({where}): at most 1.5x two threads CASing one "
                 f"word (timed just before, by the same threads)",
                 f"{fmt(ns(name))} / {fmt(f)} ns = {fmt(r, 2)}x{pm(name)}",
                 None if r is None else r <= 1.5)
    floor = "BM_Floor_MemoryLatencyClock"
    naive_mk = inproc.get("BM_Naive_UnorderedMapMutex_MillionKeys")
    naive_rss = naive_mk.get("rss_B_per_key") if naive_mk and "error" not in naive_mk else None
    for algo in ["TokenBucket", "LeakyBucket", "FixedWindow", "SlidingCounter"]:
        name = f"BM_{algo}_InMemory_MillionKeys"
        f = own_floor(inproc, name, floor)
        r = ratio(ns(name), f)
        goal(f"{algo}, 1,000,000 keys in random order: at most 1.2x one uncached read + one "
             f"clock read (timed in the same process)", f"{fmt(ns(name))} / {fmt(f)} ns = {fmt(r, 2)}x",
             None if r is None else r <= 1.2)
        b = inproc.get(name)
        rss = b.get("rss_B_per_key") if b and "error" not in b else None
        rr = ratio(rss, naive_rss)
        goal(f"{algo}, 1,000,000 keys: resident memory per key at most the naive map's",
             f"{fmt(rss, 0)} / {fmt(naive_rss, 0)} B = {fmt(rr, 2)}x",
             None if rr is None else rr <= 1.0)
    return goals


def beside_take_section(inproc, redis):
    """Refunds, penalties and takes carrying their key's parameters beside a take of the same
    algorithm in the same run (goal: each within 1.1x), in process and on Redis, as markdown
    lines. In process a refund is timed in a pair with its take (OneKeyTakeRefund: items count
    both), so its own cost is 2 x the pair's per item - the take's. The sliding log's in-process
    figures are its ManualClock runs (with the real clock its takes are mostly denials, which
    write nothing, while a penalty always writes)."""
    def ns(table, name):
        b = table.get(name)
        return ns_per_item(b) if b and "error" not in b else None

    def cell(v, take, cv=None):
        if v is None or not take:
            return "–", "–"
        r = v / take
        status = "met" if r <= 1.1 else "missed"
        noise_text = f" ±{100 * cv:.0f} %" if cv is not None else ""
        return f"{fmt(v)}", f"{r:.2f}x{noise_text} ({status})"

    def cv_of(table, *names):
        cvs = [noise(table, n) for n in names]
        if any(c is None for c in cvs):
            return None
        return sum(c * c for c in cvs) ** 0.5

    md = []
    w = md.append
    w("## Refunds, penalties and per-call parameters beside a take")
    w("")
    w("Each beside a take (`try_acquire`) of the same algorithm in the same run: the ratio of the "
      "medians (goal: each within 1.1x; ± the repetitions' noise, both figures' combined). In "
      "process, one key, ns per operation: a penalty of one unit per step (`OneKeyPenalty`); a "
      "refund, timed in a pair with a take of two units (`OneKeyTakeRefund`, 2 x the pair's "
      "ns per item - the take's); a take carrying the limiter's own parameters "
      "(`OneKeyWithParams`). The sliding log's are its ManualClock runs (with the real clock its "
      "takes are mostly denials, which write nothing; a penalty always writes). On Redis, one "
      "connection, µs per operation (`OneConnection`, `OneConnectionPenalty`, "
      "`OneConnectionRefund`, `OneConnectionWithParams`).")
    w("")
    w("| algorithm | where | take | penalty | × take | refund | × take | with params | × take |")
    w("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for algo in ALGORITHMS:
        suffix = "_ManualClock" if algo == "SlidingLog" else ""
        base = f"BM_{algo}_InMemory_"
        take_name = base + "OneKeyAdmitted" + suffix
        take = ns(inproc, take_name)
        if take is not None:
            pen_name = base + "OneKeyPenalty" + suffix
            pair_name = base + "OneKeyTakeRefund" + suffix
            wp_name = base + "OneKeyWithParams" + suffix
            pair = ns(inproc, pair_name)
            refund = 2 * pair - take if pair is not None else None
            pen = cell(ns(inproc, pen_name), take, cv_of(inproc, take_name, pen_name))
            ref = cell(refund, take, cv_of(inproc, take_name, pair_name))
            wp = cell(ns(inproc, wp_name), take, cv_of(inproc, take_name, wp_name))
            w(f"| {algo} | in process (ns{', ManualClock' if suffix else ''}) | {fmt(take)} | "
              f"{pen[0]} | {pen[1]} | {ref[0]} | {ref[1]} | {wp[0]} | {wp[1]} |")
        rbase = f"BM_{algo}_Redis_OneConnection"
        rtake = ns(redis, rbase)
        if rtake is not None:
            us = lambda v: None if v is None else v / 1000
            pen = cell(us(ns(redis, rbase + "Penalty")), us(rtake))
            ref = cell(us(ns(redis, rbase + "Refund")), us(rtake))
            wp = cell(us(ns(redis, rbase + "WithParams")), us(rtake))
            w(f"| {algo} | Redis (µs) | {fmt(us(rtake))} | {pen[0]} | {pen[1]} | {ref[0]} | "
              f"{ref[1]} | {wp[0]} | {wp[1]} |")
    w("")
    return md


def read_redis_benchmark(raw):
    rows = []
    path = os.path.join(raw, "redis_benchmark.csv")
    if not os.path.exists(path):
        return rows
    with open(path) as f:
        for line in f:
            head = line.split(",", 5)
            if len(head) < 6:
                continue
            c, p, n, cpu0, cpu1, rest = head
            fields = next(csv.reader(io.StringIO(rest)))
            if len(fields) < 8:
                continue
            rps = float(fields[1])
            rows.append({
                "c": int(c), "P": int(p), "n": int(n), "rps": rps,
                "p50_us": float(fields[4]) * 1000, "p99_us": float(fields[6]) * 1000,
                "cpu_us": (float(cpu1) - float(cpu0)) * 1e6 / int(n) if n else None,
            })
    return rows


def fmt(x, digits=1):
    if x is None:
        return "–"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}f}"


def ratio(x, y):
    return x / y if x is not None and y else None


def median(values):
    v = sorted(values)
    n = len(v)
    if n == 0:
        return None
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def spread(values):
    return f"{fmt(median(values), 2)} [{fmt(min(values), 2)}–{fmt(max(values), 2)}]" if values else "–"


def read_redis_cost(raw):
    path = os.path.join(raw, "redis_cost.json")
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f"report.py: {path}: {e}", file=sys.stderr)
        return None


def redis_cost_section(raw, meta):
    """Markdown lines for bench/redis_cost's results, and a summary for latest.json:
    Redis CPU and memory per decision beside the plain GCRA script, as ratios, with the goals."""
    data = read_redis_cost(raw)
    md = []
    w = md.append
    w("## Redis cost per decision, beside a plain GCRA script")
    w("")
    if data is None:
        w(f"Not run ({meta.get('redis_cost_status', 'bench/redis_cost not built or failed')}).")
        w("")
        return md, None
    plain_mem = data["plain_memory"]["bytes_per_key"]
    w(f"`bench/redis_cost` against its own throwaway Redis {data.get('redis_version')} on "
      f"loopback; Redis pinned to one core: {meta.get('redis_cost_pinned', 'unknown')}. Load "
      f"average at start {meta.get('load_redis_cost_start', '?')}, at end "
      f"{meta.get('load_redis_cost_end', '?')}.")
    w("")
    w(f"**CPU**: Redis's time inside the script calls (INFO commandstats: usec of EVALSHA, EVAL, "
      f"FCALL and their _RO forms; CONFIG RESETSTAT and FLUSHALL before each run) per decision. "
      f"A run is {data['decisions']:,} synchronous decisions on one connection over "
      f"{data['keys']:,} client keys `user:N` (each key decided {data['decisions'] // data['keys']} "
      f"times, one fixed shuffled order), every decision admitted. {data['rounds']} rounds per "
      f"row, interleaved (library, plain, library, plain, ...): median [min–max] of the runs; "
      f"the ratio is of the medians. **Memory**: FLUSHALL, INFO memory `used_memory`, "
      f"{data['memory_keys']:,} keys `user:0`.. one admission each, `used_memory` again: bytes "
      f"per client key. Library key prefix: \"{data.get('key_prefix', '')}\". **Plain**: the "
      f"plain floating-point GCRA script a user would write (one GET, one SET with PX; capacity "
      f"1000 at 1000 per day; in bench/redis_cost.cpp), loaded with SCRIPT LOAD and called with "
      f"EVALSHA from the same process on its own connection, same keys and order.")
    w("")
    w("| scenario | limit | library µs/decision | plain µs/decision | CPU ratio | CPU goal | "
      "library B/key | plain B/key | memory ratio | memory goal |")
    w("|---|---|---:|---:|---:|---|---:|---:|---:|---|")
    summary = []
    goals = []
    problems = []
    for s in data["scenarios"]:
        lib = [r["script_us"] for r in s["library"]]
        pl = [r["script_us"] for r in s["plain"]]
        cpu_ratio = ratio(median(lib), median(pl))
        mem = s.get("memory")
        lib_mem = mem["bytes_per_key"] if mem else None
        mem_ratio = ratio(lib_mem, plain_mem)

        def verdict(r, goal):
            if not goal:
                return "–", None
            ok = r is not None and r <= goal
            return f"≤ {goal:g}x: **{'met' if ok else 'missed'}**", ok

        cpu_text, cpu_ok = verdict(cpu_ratio, s.get("cpu_goal"))
        mem_text, mem_ok = verdict(mem_ratio, s.get("memory_goal") if mem else 0)
        name = s["name"]
        if name == "SlidingLogFull":
            # No memory run: the CPU runs' own growth, at 100 entries per key.
            lib_mem = median([r["bytes_per_key"] for r in s["library"]])
            pl_mem = median([r["bytes_per_key"] for r in s["plain"]])
            mem_cells = (f"{fmt(lib_mem, 0)}* | {fmt(pl_mem, 0)}* | "
                         f"{fmt(ratio(lib_mem, pl_mem), 2)}x* | –")
        else:
            mem_cells = (f"{fmt(lib_mem, 0)} | {fmt(plain_mem, 0)} | "
                         f"{fmt(mem_ratio, 2) + 'x' if mem_ratio else '–'} | {mem_text}")
        w(f"| {name} | {s['setup']} | {spread(lib)} | {spread(pl)} | {fmt(cpu_ratio, 2)}x | "
          f"{cpu_text} | {mem_cells} |")
        if cpu_ok is not None:
            goals.append({"goal": f"{name}: Redis CPU per decision at most {s['cpu_goal']:g}x the plain script",
                          "measured": f"{fmt(cpu_ratio, 2)}x", "status": "met" if cpu_ok else "missed"})
        if mem_ok is not None:
            goals.append({"goal": f"{name}: Redis memory per client key at most {s['memory_goal']:g}x the plain script",
                          "measured": f"{fmt(mem_ratio, 2)}x", "status": "met" if mem_ok else "missed"})
        runs = s["library"] + s["plain"] + ([mem] if mem else [])
        if any(r["degraded"] for r in runs):
            problems.append(f"{name}: {sum(r['degraded'] for r in runs)} decisions made by the "
                            "failure policy (not by Redis): its figures are not Redis's")
        if any(r["admitted"] < 1 for r in runs):
            problems.append(f"{name}: not every decision was admitted (min "
                            f"{min(r['admitted'] for r in runs):.4f}): the runs do not all write")
        summary.append({"name": name, "library_us": lib, "plain_us": pl, "cpu_ratio": cpu_ratio,
                        "library_B_per_key": lib_mem, "plain_B_per_key": plain_mem,
                        "memory_ratio": mem_ratio})
    w("")
    full = next((s for s in data["scenarios"] if s["name"] == "SlidingLogFull"), None)
    if full:
        extra = (median([r["bytes_per_key"] for r in full["library"]])
                 - median([r["bytes_per_key"] for r in full["plain"]]))
        w("\\* SlidingLogFull has no memory run: its bytes per key are the CPU runs' growth over "
          f"{full['keys']} keys, each log then holding "
          f"{data['decisions'] // full['keys']} entries, beside the plain script's growth over "
          "the same keys. Over so few keys the fixed costs (client buffers, the key table) weigh "
          f"a lot: read the difference, {fmt(extra, 0)} B more per client key.")
        w("")
    for p in problems:
        w(f"- **Warning**: {p}.")
    if problems:
        w("")
    w("Where the microseconds go (medians over the library's runs): the script's time splits into "
      "the Redis commands it calls (commandstats counts every `redis.call`) and the rest (Lua: "
      "argument parsing, arithmetic, building the reply). Process CPU is redis-server's user + "
      "sys time per decision (networking and the event loop included); wall is the client's "
      "round trip.")
    w("")
    w("| scenario | script µs | of which commands µs (calls) | Lua and the rest µs | plain: commands µs (calls), rest µs | process CPU µs, library / plain | wall µs, library / plain | Redis keys per client key |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|")
    for s in data["scenarios"]:
        def med(runs, field):
            return median([r[field] for r in runs])
        lib, pl = s["library"], s["plain"]
        mem = s.get("memory") or (lib[-1] if lib else None)
        keys_per = mem["redis_keys"] / (data["memory_keys"] if s.get("memory") else s["keys"]) if mem else None
        w(f"| {s['name']} | {fmt(med(lib, 'script_us'), 2)} | {fmt(med(lib, 'inner_us'), 2)} "
          f"({fmt(med(lib, 'inner_calls'), 1)}) | "
          f"{fmt(med(lib, 'script_us') - med(lib, 'inner_us'), 2)} | "
          f"{fmt(med(pl, 'inner_us'), 2)} ({fmt(med(pl, 'inner_calls'), 1)}), "
          f"{fmt(med(pl, 'script_us') - med(pl, 'inner_us'), 2)} | "
          f"{fmt(med(lib, 'process_cpu_us'), 1)} / {fmt(med(pl, 'process_cpu_us'), 1)} | "
          f"{fmt(med(lib, 'wall_us'), 1)} / {fmt(med(pl, 'wall_us'), 1)} | {fmt(keys_per, 2)} |")
    w("")
    return md, {"data": data, "summary": summary, "goals": goals, "problems": problems}


def write_redis_cost(raw, out, meta):
    """Writes OUT/redis_cost.md (the section alone, with the run's context); returns its text."""
    md, _ = redis_cost_section(raw, meta)
    head = [f"# ratelimit: Redis cost per decision", "",
            f"- Date: {meta.get('date')}; commit {meta.get('commit')}",
            f"- Machine: {meta.get('cpu')}, {meta.get('cores')} cores; Linux {meta.get('kernel')}; "
            f"{meta.get('compiler')}", ""]
    text = "\n".join(head + md[2:] if md and md[0].startswith("## ") else head + md)
    with open(os.path.join(out, "redis_cost.md"), "w") as f:
        f.write(text)
    return text


# --- pipelining ---------------------------------------------------------------------------------

PIPELINING_GOALS = {
    1: {"title": "32 threads, one blocking decision each in flight",
        "reference": "redis-benchmark -c 32 -P 1", "kind": "throughput", "bound": 1.0},
    2: {"title": "one thread, 64 non-blocking decisions in flight",
        "reference": "redis-benchmark -c 4 -P 16", "kind": "throughput", "bound": 0.8},
    3: {"title": "one thread, blocking, one at a time",
        "reference": "redis-benchmark -c 1 -P 1", "kind": "latency", "bound": 10.0},
}
CONTESTANT_TEXT = {
    "library": "library",
    "library-chain": "library, next decision submitted from each completion",
    "before": "before: blocking pool (fbb2f71)",
    "redis-benchmark": "redis-benchmark",
    "evalsha": "the same EVALSHA on plain hiredis, one at a time (no library)",
    "ping": "PING by the calling thread (no library)",
    "ping-handoff": "PING through a thread woken by eventfd, caller on an atomic (no library)",
}
CONTESTANT_ORDER = ["library", "library-chain", "before", "redis-benchmark", "evalsha", "ping",
                    "ping-handoff"]


def read_pipelining(raw):
    """{goal: {contestant: [run, ...] in round order}} from bench/run's pipelining.tsv; each run
    has round, load, per_second, p50_us, p99_us, client_cpu_us, caller_cpu_us (None for
    redis-benchmark), redis_cpu_us, others_cores (CPU the rest of the machine used during the
    run, in cores), invalid (why the run did not measure Redis, or None)."""
    path = os.path.join(raw, "pipelining.tsv")
    if not os.path.exists(path):
        return None
    runs = {}
    with open(path) as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if len(fields) < 9:
                continue
            rnd, goal, who, load = int(fields[0]), int(fields[1]), fields[2], fields[3]
            wall, busy, own, redis_s = (float(x) for x in fields[4:8])
            if who == "redis-benchmark":
                c, p, n, failed = fields[8:12]
                row = next(csv.reader(io.StringIO(fields[12]))) if len(fields) > 12 else []
                n = int(n)
                if len(row) < 8:
                    run = {"invalid": "no CSV row from redis-benchmark", "per_second": None,
                           "p50_us": None, "p99_us": None}
                else:
                    run = {"per_second": float(row[1]), "p50_us": float(row[4]) * 1000,
                           "p99_us": float(row[6]) * 1000,
                           "invalid": f"{failed} EVALSHA calls failed" if int(failed) else None}
                run.update({"c": int(c), "P": int(p), "decisions": n,
                            "redis_cpu_us": redis_s * 1e6 / n, "client_cpu_us": own * 1e6 / n,
                            "caller_cpu_us": None})
            else:
                run = json.loads(fields[8])
                if run.get("redis_cpu_us", 0) < 0:  # not measured (PING runs)
                    run["redis_cpu_us"] = None
                problems = []
                if run["degraded"]:
                    problems.append(f"{run['degraded']} decisions degraded")
                if run["admitted"] < 1:
                    problems.append(f"admitted {run['admitted']:.4f} < 1")
                run["invalid"] = "; ".join(problems) or None
            run["round"], run["load"] = rnd, load
            run["others_cores"] = max(0.0, busy - own - redis_s) / wall if wall > 0 else None
            runs.setdefault(goal, {}).setdefault(who, []).append(run)
    return runs


def paired(a_runs, b_runs, f):
    """f(a, b) for the runs of the same round."""
    b_by = {r["round"]: r for r in b_runs}
    return [f(a, b_by[a["round"]]) for a in a_runs
            if a["round"] in b_by and f(a, b_by[a["round"]]) is not None]


def pipelining_section(raw, meta):
    """Markdown lines for the pipelining goals (bench/run's pipelining rounds), and a summary."""
    runs = read_pipelining(raw)
    md = []
    w = md.append
    w("## Auto-pipelining against redis-benchmark")
    w("")
    if not runs:
        w(f"Not run ({meta.get('pipelining_status', 'bench/pipelining_bench not built or failed')}).")
        w("")
        return md, None
    rounds = meta.get("pipelining_rounds", "?")
    others = [r["others_cores"] for by in runs.values() for rs in by.values() for r in rs
              if r.get("others_cores") is not None]
    loads = [meta[k] for k in sorted((k for k in meta if k.startswith("load_pipelining_round")),
                                     key=lambda k: int(k[len("load_pipelining_round"):]))]
    w(f"`bench/pipelining_bench` (the library, Release) and `redis-benchmark` on one throwaway "
      f"redis-server on loopback (not pinned: both share the machine's {meta.get('cores', '?')} "
      f"cores with it). redis-benchmark sends the library's own command, captured with MONITOR: "
      f"`{meta.get('pipelining_command', '?')}` (the token bucket, capacity 1000 at 1000/s, "
      f"key prefix `bench:`), its keys spread with `-r 100000`; the library draws the same keys "
      f"`client-000000000000`..`client-000000099999` uniformly. Every decision is admitted and "
      f"writes on both sides. {rounds} rounds; in each, every contestant runs once, in an order "
      f"rotated by one per round, after a FLUSHALL; figures are median [min–max] over the rounds, "
      f"and a ratio is the median [min–max] of the rounds' own ratios (runs seconds apart share "
      f"the machine's state). Other work on the machine during the runs (its busy CPU from "
      f"/proc/stat, hypervisor steal included, less the contestant's and redis-server's own): "
      f"{spread(others)} cores, per contestant in the table below (the load average, "
      f"{meta.get('load_pipelining_start', '?')} at the start, {'; '.join(loads) or '?'} at each "
      f"round, {meta.get('load_pipelining_end', '?')} at the end, counts the benchmark's own "
      f"threads: 32 in goal 1). Library runs: a warm-up of a tenth of "
      f"the decisions first (connections, script), not counted; redis-benchmark counts from its "
      f"first call. Equal work in flight: goal 1, 32 threads each looping a blocking "
      f"`try_acquire`; goal 2, one thread keeping exactly 64 `try_acquire_async` in flight (it "
      f"submits the next as a completion frees a slot, waiting while 64 are out); goal 3, one "
      f"thread, p50 of the call's own latency. Goal 2 is measured twice: the calling thread "
      f"submitting (woken when the window is full and a completion frees a slot: what an event "
      f"loop handing requests to the limiter does), and each completion submitting the next "
      f"itself on the storage's I/O thread (one thread at work, as in redis-benchmark).")
    w("")
    summary = {"runs": runs, "goals": []}
    problems = []
    for goal, by in sorted(runs.items()):
        for who, rs in by.items():
            for r in rs:
                if r.get("invalid"):
                    problems.append(f"goal {goal}, {who}, round {r['round']}: {r['invalid']}")

    def invalid(goal, who):
        return any(r.get("invalid") for r in runs.get(goal, {}).get(who, []))

    def values(goal, who, field):
        return [r[field] for r in runs.get(goal, {}).get(who, []) if r.get(field) is not None]

    w("| goal | library | reference | measured (rounds) | goal | status |")
    w("|---|---|---|---|---|---|")
    # Goal 2 twice: the caller's thread submitting (what an event loop does) and each completion
    # submitting the next on the I/O thread (no hand-off back to the caller).
    # Goal 3 also against the same EVALSHA on plain hiredis, timed to the ns: redis-benchmark
    # reports its latencies at the top of 8 µs buckets.
    rows = [(1, "library", "", "redis-benchmark"),
            (2, "library", " (the calling thread submits)", "redis-benchmark"),
            (2, "library-chain", " (each completion submits the next)", "redis-benchmark"),
            (3, "library", "", "redis-benchmark"),
            (3, "library", " (against the same EVALSHA on plain hiredis, timed to the ns)",
             "evalsha")]
    for goal, who, variant, ref_who in rows:
        spec = PIPELINING_GOALS[goal]
        lib, ref = runs.get(goal, {}).get(who, []), runs.get(goal, {}).get(ref_who, [])
        if not lib or not ref:
            continue
        if spec["kind"] == "throughput":
            per_round = paired(lib, ref, lambda a, b: ratio(a["per_second"], b["per_second"]))
            lib_text = f"{spread(values(goal, who, 'per_second'))}/s"
            ref_text = f"{spread(values(goal, ref_who, 'per_second'))}/s"
            measured = f"{spread(per_round)}x"
            target = f"≥ {spec['bound']:g}x"
            ok_rounds = sum(1 for x in per_round if x >= spec["bound"])
            ok = median(per_round) is not None and median(per_round) >= spec["bound"]
        else:
            per_round = paired(lib, ref, lambda a, b: a["p50_us"] - b["p50_us"])
            lib_text = f"p50 {spread(values(goal, who, 'p50_us'))} µs"
            ref_text = f"p50 {spread(values(goal, ref_who, 'p50_us'))} µs"
            measured = f"{spread(per_round)} µs more"
            target = f"≤ {spec['bound']:g} µs more"
            ok_rounds = sum(1 for x in per_round if x <= spec["bound"])
            ok = median(per_round) is not None and median(per_round) <= spec["bound"]
        if invalid(goal, who) or invalid(goal, ref_who):
            status = "**not measured** (see the warnings)"
        else:
            status = f"**{'met' if ok else 'missed'}** ({ok_rounds} of {len(per_round)} rounds)"
        ref_name = f"`{spec['reference']}`" if ref_who == "redis-benchmark" else "plain hiredis"
        w(f"| {goal}. {spec['title']}{variant} | {lib_text} | {ref_name}: {ref_text} | "
          f"{measured} | {target} | {status} |")
        summary["goals"].append({"goal": f"{spec['title']}{variant}: {target} of {ref_name}",
                                 "measured": measured, "per_round": per_round,
                                 "status": "met" if ok else "missed"})
    w("")
    for p in problems:
        w(f"- **Warning**: {p}: the run did not measure Redis alone.")
    if problems:
        w("")

    w("Every contestant, median [min–max] over the rounds. CPU per decision: the client process "
      "(redis-benchmark: its user + sys time; the library: the calling threads, then the storage's "
      "I/O thread and the rest of the process) and redis-server (INFO cpu, user + sys).")
    w("")
    w("| goal | contestant | decisions/s | p50 µs | p99 µs | client CPU µs/decision | of which "
      "calling threads / I/O thread | Redis CPU µs/decision | other work, cores | degraded or failed |")
    w("|---|---|---:|---:|---:|---:|---|---:|---:|---:|")
    order = CONTESTANT_ORDER
    for goal in sorted(runs):
        for who in sorted(runs[goal], key=lambda x: order.index(x) if x in order else 9):
            rs = runs[goal][who]
            callers = values(goal, who, "caller_cpu_us")
            split = "–"
            if callers:
                io_thread = [r["client_cpu_us"] - r["caller_cpu_us"] for r in rs]
                split = f"{fmt(median(callers), 1)} / {fmt(median(io_thread), 1)}"
            bad = sum(r.get("degraded", 0) for r in rs) if who != "redis-benchmark" else \
                sum(1 for r in rs if r.get("invalid"))
            label = CONTESTANT_TEXT.get(who, who)
            if who == "redis-benchmark" and rs:
                label += f" `-c {rs[0]['c']} -P {rs[0]['P']}`"
            elif rs and rs[0].get("mode") in ("blocking", "window", "chain"):
                label += (f" ({rs[0]['threads']} threads" if rs[0]["mode"] == "blocking"
                          else f" ({rs[0]['window']} in flight") + f", pool_size {rs[0]['pool']})"
            w(f"| {goal} | {label} | {spread(values(goal, who, 'per_second'))} | "
              f"{spread(values(goal, who, 'p50_us'))} | {spread(values(goal, who, 'p99_us'))} | "
              f"{spread(values(goal, who, 'client_cpu_us'))} | {split} | "
              f"{spread(values(goal, who, 'redis_cpu_us'))} | "
              f"{spread(values(goal, who, 'others_cores'))} | {bad} |")
    w("")

    if any("before" in runs.get(g, {}) for g in runs):
        w(f"**Before and after**: the blocking connection pool (commit "
          f"{meta.get('pipelining_baseline', '?')}: one round trip per decision per thread, "
          f"pool_size = the threads) built from the same benchmark source against that commit's "
          f"headers, in the same rounds. It has no non-blocking call, so goal 2 has no before.")
        w("")
        w("| goal | before | after | after / before (rounds) | before vs reference (rounds) |")
        w("|---|---|---|---|---|")
        for goal, spec in PIPELINING_GOALS.items():
            by = runs.get(goal, {})
            if "before" not in by or "library" not in by or "redis-benchmark" not in by:
                continue
            if spec["kind"] == "throughput":
                field, unit = "per_second", "/s"
                after_before = paired(by["library"], by["before"],
                                      lambda a, b: ratio(a["per_second"], b["per_second"]))
                vs_ref = paired(by["before"], by["redis-benchmark"],
                                lambda a, b: ratio(a["per_second"], b["per_second"]))
                w(f"| {goal}. {spec['title']} | {spread(values(goal, 'before', field))}{unit} | "
                  f"{spread(values(goal, 'library', field))}{unit} | {spread(after_before)}x | "
                  f"{spread(vs_ref)}x of `{spec['reference']}` |")
            else:
                diff = paired(by["library"], by["before"], lambda a, b: a["p50_us"] - b["p50_us"])
                vs_ref = paired(by["before"], by["redis-benchmark"],
                                lambda a, b: a["p50_us"] - b["p50_us"])
                w(f"| {goal}. {spec['title']} | p50 {spread(values(goal, 'before', 'p50_us'))} µs | "
                  f"p50 {spread(values(goal, 'library', 'p50_us'))} µs | {spread(diff)} µs more | "
                  f"{spread(vs_ref)} µs more than `{spec['reference']}` |")
        w("")

    by3 = runs.get(3, {})
    if all(k in by3 for k in ("library", "redis-benchmark", "ping", "ping-handoff")):
        def p50_gap(a, b):
            return paired(by3[a], by3[b], lambda x, y: x["p50_us"] - y["p50_us"])
        gap = p50_gap("library", "redis-benchmark")
        handoff = p50_gap("ping-handoff", "ping")
        before = p50_gap("before", "redis-benchmark") if "before" in by3 else []
        plain = p50_gap("library", "evalsha") if "evalsha" in by3 else []
        plain_rb = p50_gap("redis-benchmark", "evalsha") if "evalsha" in by3 else []
        w(f"**Goal 3, where the microseconds go** (p50 differences, median [min–max] of the "
          f"rounds): the library takes {spread(gap)} µs more than `redis-benchmark -c 1 -P 1`"
          + (f", the blocking pool, whose calling thread does its own I/O, {spread(before)} µs "
             f"more" if before else "")
          + (f"; {spread(plain)} µs more than the same EVALSHA sent one at a time on plain "
             f"hiredis and timed to the nanosecond. redis-benchmark's latencies come from a "
             f"histogram of 8 µs buckets (hdr_histogram, lowest value 10 µs) reported at the top "
             f"of the bucket, so its p50 reads 0 to 7 µs above the true one ({spread(plain_rb)} µs "
             f"above plain hiredis's here), which favours the library by as much"
             if plain else "")
          + f". A PING handed to a thread asleep in ppoll through an eventfd, the caller waiting "
          f"on an atomic (the I/O thread's two hand-offs, nothing else of the library), takes "
          f"{spread(handoff)} µs more than a PING the calling thread makes itself: what a "
          f"decision pays going through the I/O thread and back. A blocking decision alone in "
          f"flight no longer does: it makes its own round trip on a connection the I/O thread "
          f"lends it (docs/redis.md, \"Threads\"), so the gap left is the library's own work "
          f"per decision.")
        w("")

    cores = int(meta.get("cores") or 0)
    if cores:
        w(f"**Where the time goes**: CPU per decision summed over the client and redis-server "
          f"(medians). With {cores} cores and nothing else running, no contestant can exceed "
          f"{cores} s of CPU per second: the ceiling is {cores} × 10^6 / the sum, and a contestant "
          f"near its ceiling is bound by CPU, its own or Redis's, not by round trips.")
        w("")
        w("| goal | contestant | client µs | Redis µs | sum µs | CPU ceiling /s | measured / ceiling |")
        w("|---|---|---:|---:|---:|---:|---:|")
        for goal in sorted(runs):
            for who in sorted(runs[goal], key=lambda x: order.index(x) if x in order else 9):
                client = median(values(goal, who, "client_cpu_us"))
                redis_us = median(values(goal, who, "redis_cpu_us"))
                rate = median(values(goal, who, "per_second"))
                if client is None or redis_us is None:
                    continue
                total = client + redis_us
                ceiling = cores * 1e6 / total if total > 0 else None
                w(f"| {goal} | {CONTESTANT_TEXT.get(who, who)} | {fmt(client, 1)} | "
                  f"{fmt(redis_us, 1)} | {fmt(total, 1)} | {fmt(ceiling)} | "
                  f"{fmt(ratio(rate, ceiling), 2)} |")
        w("")
    summary["problems"] = problems
    return md, summary


def write_pipelining(raw, out, meta):
    """Writes OUT/pipelining.md (the section alone, with the run's context); returns its text."""
    md, _ = pipelining_section(raw, meta)
    head = ["# ratelimit: auto-pipelining against redis-benchmark", "",
            f"- Date: {meta.get('date')}; commit {meta.get('commit')}",
            f"- Machine: {meta.get('cpu')}, {meta.get('cores')} cores; Linux {meta.get('kernel')}; "
            f"{meta.get('compiler')}; {meta.get('flags')}; Redis {meta.get('redis')}",
            f"- Run: `bench/run --pipelining` (or a full `bench/run`); rounds "
            f"{meta.get('pipelining_rounds', '?')}", ""]
    text = "\n".join(head + md[2:] if md and md[0].startswith("## ") else head + md)
    with open(os.path.join(out, "pipelining.md"), "w") as f:
        f.write(text)
    return text


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--redis-cost":
        raw, out = sys.argv[2], sys.argv[3]
        print(write_redis_cost(raw, out, read_meta(raw)))
        return
    if len(sys.argv) == 4 and sys.argv[1] == "--pipelining":
        raw, out = sys.argv[2], sys.argv[3]
        print(write_pipelining(raw, out, read_meta(raw)))
        return
    inprocess_only = len(sys.argv) == 4 and sys.argv[1] == "--inprocess"
    if inprocess_only:
        sys.argv.pop(1)
    raw, out = sys.argv[1], sys.argv[2]
    meta = read_meta(raw)
    inproc = read_benchmarks(sorted(glob.glob(os.path.join(raw, "inprocess_*.json"))))
    redis = read_benchmarks([p for p in [os.path.join(raw, "redis.json")] if os.path.exists(p)])
    rb = read_redis_benchmark(raw)
    rb_by = {(r["c"], r["P"]): r for r in rb}

    def ns(name, table=inproc):
        b = table.get(name)
        return ns_per_item(b) if b and "error" not in b else None

    clock_floor = ns("BM_Floor_SteadyClockNow")
    cas_floor = ns("BM_Floor_AtomicCas")
    memory_floor = ns("BM_Floor_MemoryLatency")
    md = []
    w = md.append
    w("# ratelimit benchmarks: latest run")
    w("")
    w(f"- Date: {meta.get('date')}; commit {meta.get('commit')}")
    w(f"- Machine: {meta.get('cpu')}, {meta.get('cores')} cores; Linux {meta.get('kernel')}")
    w(f"- Compiler: {meta.get('compiler')}; {meta.get('flags')}; Google Benchmark "
      f"{meta.get('benchmark_lib')}; Redis {meta.get('redis')}")
    loads = [("start", "load_start"), ("after in-process one key", "load_inprocess"),
             ("after 1M keys", "load_million"), ("after library on Redis", "load_redis"),
             ("after redis-benchmark", "load_redis_benchmark"),
             ("after pipelining", "load_pipelining_end"), ("end", "load_end")]
    w("- Load average (1/5/15 min) " + "; ".join(f"{label}: {meta[k]}" for label, k in loads if k in meta)
      + ". Figures from a machine with load well above 0 are noisy (other work shares the cores).")
    w("")
    w("ns/decision = 10^9 / items per second (CPU time for one thread, wall time for several "
      "threads: then it is the aggregate cost, 1 / throughput). In process, one key: the median of "
      f"{meta.get('repetitions', '?')} repetitions. Ratios are to the floors measured in the same binary and run: "
      "`BM_Floor_SteadyClockNow` (one clock read) and `BM_Floor_AtomicCas` (a clock read and one "
      "compare-and-swap: the cheapest possible decision).")
    w("")

    # --- floors and one key -----------------------------------------------------------------
    w("## In process, one key")
    w("")
    w("| Benchmark | ns/decision | × AtomicCas | − AtomicCas (ns) | admitted |")
    w("|---|---:|---:|---:|---:|")
    for name in ["BM_Floor_SteadyClockNow", "BM_Floor_AtomicCas",
                 "BM_Floor_AtomicCasTwoThreads/threads:2", "BM_Floor_MemoryLatency",
                 "BM_Floor_MemoryLatencyClock", "BM_Naive_MutexBucket_NoKey",
                 "BM_Naive_UnorderedMapMutex_OneKey"]:
        if name in inproc:
            w(f"| `{name}` | {fmt(ns(name))} | {fmt(ratio(ns(name), cas_floor), 2)} | – | – |")
    for algo in ALGORITHMS:
        for scenario in ["NoKey", "OneKeyAdmitted", "OneKeyBound", "OneKeyDenied",
                         "OneKeyTwoThreads", "OneKeyTwoThreadsTwoLines"]:
            for suffix in ["", "_ManualClock"]:
                name = f"BM_{algo}_InMemory_{scenario}{suffix}"
                if scenario.startswith("OneKeyTwoThreads"):
                    name += "/threads:2"
                b = inproc.get(name)
                if b is None:
                    continue
                if "error" in b:
                    w(f"| `{name}` | error: {b['error']} | | | |")
                    continue
                v = ns_per_item(b)
                diff = v - cas_floor if v is not None and cas_floor else None
                w(f"| `{name}` | {fmt(v)} | {fmt(ratio(v, cas_floor), 2)} | {fmt(diff)} | "
                  f"{fmt(b.get('admitted'), 3)} |")
    w("")
    w("The sliding log runs at limit 100 on its shortest window (1 ms): with the real clock most "
      "of its \"admitted\" requests are denied (see `admitted`); its ManualClock variant, advanced "
      "W/100 per call, admits every call with 99 live entries. _ManualClock variants read a "
      "ManualClock (one atomic load) instead of steady_clock: the difference is the clock's cost.")
    w("")

    # --- million keys -------------------------------------------------------------------------
    w("## In process, 1,000,000 keys")
    w("")
    w("Keys `client-0000000`..`client-0999999` built before timing, inserted in random order, "
      "the table's last resizes finished (`reclaim`; the naive map is reserved for the keys), "
      "then decided in key order (random in the table): 2,000,000 decisions. Each benchmark in "
      "its own process, so resident memory per key (growth of /proc/self/statm while storing the "
      "keys, / 10^6) is its own. `BM_Floor_MemoryLatency` (one dependent read of a random line "
      f"of a 128 MiB array: {fmt(memory_floor)} ns in the main run) is what a key not in cache costs "
      "at least; each process times it again before its own benchmark (`own floor`), so that "
      "the ratio compares figures taken side by side.")
    w("")
    w("| Benchmark | ns/decision | × AtomicCas | own floor (ns) | × own floor | state B/key | resident B/key |")
    w("|---|---:|---:|---:|---:|---:|---:|")
    for algo in ALGORITHMS + ["Naive_UnorderedMapMutex"]:
        for suffix in ["", "_ManualClock"]:
            name = f"BM_{algo}_InMemory_MillionKeys{suffix}"
            if algo.startswith("Naive"):
                name = f"BM_{algo}_MillionKeys{suffix}"
            b = inproc.get(name)
            if b is None:
                continue
            if "error" in b:
                w(f"| `{name}` | error: {b['error']} | | | | | |")
                continue
            v = ns_per_item(b)
            f = own_floor(inproc, name, "BM_Floor_MemoryLatency")
            w(f"| `{name}` | {fmt(v)} | {fmt(ratio(v, cas_floor), 2)} | {fmt(f)} | "
              f"{fmt(ratio(v, f), 2)} | "
              f"{fmt(b.get('state_B_per_key'), 0)} | {fmt(b.get('rss_B_per_key'), 0)} |")
    w("")

    # --- in process at the machine's floor ---------------------------------------------------
    w("## Goals (in process at the machine's floor)")
    w("")
    w("Every figure from this run, side by side in one binary: ratios of medians; ± is the noise "
      "of the repetitions (coefficient of variation; for a ratio, both figures' combined). The "
      "1,000,000-key runs are one repetition each, in their own process. On a shared machine the "
      "absolute figures drift with the load (see above): compare the ratios.")
    w("")
    w("| Goal | Measured | Status |")
    w("|---|---|---|")
    for text, measured, status in issue19_goals(inproc):
        w(f"| {text} | {measured} | {status} |")
    w("")
    if inprocess_only:
        md.extend(beside_take_section(inproc, {}))
        with open(os.path.join(out, "inprocess.md"), "w") as f:
            f.write("\n".join(md))
        print("\n".join(md))
        return

    # --- Redis --------------------------------------------------------------------------------
    w("## Redis's own limit: redis-benchmark")
    w("")
    if rb:
        w("`redis-benchmark` sending the library's own token-bucket EVALSHA (captured from the "
          "library with MONITOR: SHA " + f"`{meta.get('redis_benchmark_sha', '?')}`" + ", the "
          "library's arguments), keys `bench:{client-__rand_int__}tb2:` spread over 100,000 "
          "(`-r 100000`).")
        w("")
        w("| redis-benchmark | calls/s | µs/call | p50 µs | p99 µs | Redis CPU µs/call |")
        w("|---|---:|---:|---:|---:|---:|")
        for r in rb:
            w(f"| `-c {r['c']} -P {r['P']}` ({r['n']:,} calls) | {fmt(r['rps'])} | "
              f"{fmt(1e6 / r['rps'])} | {fmt(r['p50_us'])} | {fmt(r['p99_us'])} | {fmt(r['cpu_us'], 2)} |")
    else:
        w("Not run (lua/gcra.lua or lua/single.lua missing).")
    w("")
    w("## The library on Redis")
    w("")
    if redis:
        w("A throwaway redis-server on loopback; keys spread uniformly over 100,000 client keys; "
          "every algorithm with generous limits (so decisions write). Latency percentiles are per "
          "call (one decision, or one whole batch round trip), averaged over threads for pools. "
          "Ratios: one connection to `-c 1 -P 1`, pools to `-c 32 -P 1`, batches to `-c 32 -P 16`.")
        w("")
        w("| Benchmark | decisions/s | µs/decision | p50 µs | p99 µs | p99.9 µs | Redis CPU µs/decision | × redis-benchmark | degraded |")
        w("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for algo in ALGORITHMS:
            for scenario, ref in [("OneConnection", (1, 1)), ("Pool/threads:2", (32, 1)),
                                  ("Pool/threads:8", (32, 1)), ("Pool/threads:32", (32, 1)),
                                  ("Batch/16", (32, 16)), ("Batch/64", (32, 16))]:
                name = f"BM_{algo}_Redis_{scenario}"
                b = redis.get(name)
                if b is None:
                    continue
                if "error" in b:
                    w(f"| `{name}` | error: {b['error']} | | | | | | | |")
                    continue
                ips = b.get("items_per_second")
                refr = rb_by.get(ref)
                w(f"| `{name}` | {fmt(ips)} | {fmt(1e6 / ips if ips else None)} | "
                  f"{fmt(b.get('p50_us'))} | {fmt(b.get('p99_us'))} | {fmt(b.get('p999_us'))} | "
                  f"{fmt(b.get('redis_cpu_us'), 2)} | "
                  f"{fmt(ratio(ips, refr['rps'] if refr else None), 2)} (`-c {ref[0]} -P {ref[1]}`) | "
                  f"{fmt(b.get('degraded'), 0)} |")
    else:
        w("Not run (no redis_bench: include/ratelimit/redis.hpp or hiredis missing).")
    w("")

    md.extend(beside_take_section(inproc, redis))

    cost_md, cost = redis_cost_section(raw, meta)
    md.extend(cost_md)
    if cost is not None:  # a failed run leaves the last redis_cost.md in place
        write_redis_cost(raw, out, meta)

    pipelining_md, pipelining = pipelining_section(raw, meta)
    md.extend(pipelining_md)
    if pipelining is not None:  # likewise for pipelining.md
        write_pipelining(raw, out, meta)

    # --- goals --------------------------------------------------------------------------------
    goals = []

    def goal(text, measured, ok):
        status = "–" if ok is None else ("met" if ok else "missed")
        goals.append((text, measured, status))

    for algo, bound in [("TokenBucket", 15), ("LeakyBucket", 15), ("FixedWindow", 25),
                        ("SlidingCounter", 25)]:
        v = ns(f"BM_{algo}_InMemory_OneKeyAdmitted")
        d = v - cas_floor if v is not None and cas_floor else None
        goal(f"{algo}, one key, one thread: within {bound} ns of AtomicCas",
             f"{fmt(v)} ns = AtomicCas + {fmt(d)} ns", None if d is None else d <= bound)
    # The sliding log: its admitted case proper is the ManualClock run (with the real clock most
    # calls are denied); add the clock's cost back to compare with the floor.
    v = ns("BM_SlidingLog_InMemory_OneKeyAdmitted_ManualClock")
    if v is not None and clock_floor and cas_floor:
        v_clock = v + clock_floor
        d = v_clock - cas_floor
        goal("SlidingLog (limit 100), one key, one thread: within 60 ns of AtomicCas",
             f"{fmt(v)} ns with ManualClock + {fmt(clock_floor)} ns clock = AtomicCas + {fmt(d)} ns",
             d <= 60)
    for algo in ALGORITHMS:
        b = inproc.get(f"BM_{algo}_InMemory_MillionKeys")
        if b is None or "error" in b:
            continue
        v = ns_per_item(b)
        state_b, rss_b = b.get("state_B_per_key"), b.get("rss_B_per_key")
        goal(f"{algo}, 1,000,000 keys: under 150 ns per decision",
             f"{fmt(v)} ns (memory floor {fmt(memory_floor)} ns, clock {fmt(clock_floor)} ns)",
             v < 150)
        if algo != "SlidingLog":
            goal(f"{algo}, 1,000,000 keys: at most 64 B state, resident at most 2x (128 B) per key",
                 f"{fmt(state_b, 0)} B state, {fmt(rss_b, 0)} B resident",
                 state_b <= 64 and rss_b <= 128)
    c1 = rb_by.get((1, 1))
    tb1 = redis.get("BM_TokenBucket_Redis_OneConnection")
    if c1 and tb1 and "error" not in tb1:
        r = tb1["items_per_second"] / c1["rps"]
        goal("Redis, one connection (token bucket): at least 0.9x redis-benchmark -c 1 -P 1",
             f"{fmt(tb1['items_per_second'])}/s vs {fmt(c1['rps'])}/s = {r:.2f}x", r >= 0.9)
    for algo in ALGORITHMS:
        b = redis.get(f"BM_{algo}_Redis_OneConnection")
        if b and "error" not in b and b.get("p99_us") is not None:
            goal(f"Redis, one connection ({algo}): p99 latency under 200 µs",
                 f"p99 {fmt(b['p99_us'])} µs (p50 {fmt(b['p50_us'])} µs)", b["p99_us"] < 200)
    c32 = rb_by.get((32, 16))
    tbb = redis.get("BM_TokenBucket_Redis_Batch/16")
    if c32 and tbb and "error" not in tbb:
        r = tbb["items_per_second"] / c32["rps"]
        goal("Redis, batch of 16 (token bucket): at least 0.7x redis-benchmark -c 32 -P 16",
             f"{fmt(tbb['items_per_second'])}/s vs {fmt(c32['rps'])}/s = {r:.2f}x", r >= 0.7)
    w("## Goals: the library against its references")
    w("")
    w("| Goal | Measured | Status |")
    w("|---|---|---|")
    for text, measured, status in goals:
        w(f"| {text} | {measured} | {status} |")
    w("")
    w("![ns per decision](latest.png)")
    w("")

    with open(os.path.join(out, "latest.md"), "w") as f:
        f.write("\n".join(md))

    summary = {
        "meta": meta,
        "inprocess": {k: {kk: vv for kk, vv in v.items() if kk in (
            "items_per_second", "real_time", "cpu_time", "time_unit", "admitted",
            "state_B_per_key", "rss_B_per_key", "error")} for k, v in inproc.items()},
        "redis": {k: {kk: vv for kk, vv in v.items() if kk in (
            "items_per_second", "p50_us", "p99_us", "p999_us", "redis_cpu_us", "degraded",
            "admitted", "error")} for k, v in redis.items()},
        "redis_benchmark": rb,
        "goals": [{"goal": g, "measured": m, "status": s} for g, m, s in goals],
        "redis_cost": cost,
        "pipelining": pipelining,
    }
    with open(os.path.join(out, "latest.json"), "w") as f:
        json.dump(summary, f, indent=1, sort_keys=True)

    # --- chart ----------------------------------------------------------------------------------
    series = [("in process, 1 key", lambda a: ns(f"BM_{a}_InMemory_OneKeyAdmitted")),
              ("in process, 1M keys", lambda a: ns(f"BM_{a}_InMemory_MillionKeys")),
              ("Redis, 1 connection", lambda a: ns(f"BM_{a}_Redis_OneConnection", redis)),
              ("Redis, 32 threads", lambda a: ns(f"BM_{a}_Redis_Pool/threads:32", redis)),
              ("Redis, batch of 64", lambda a: ns(f"BM_{a}_Redis_Batch/64", redis))]
    # The references, measured in the same run, as groups of their own left of the algorithms:
    # the cheapest possible decision (a clock read and one CAS) and the naive mutex-guarded map a
    # user would write, in the in-process columns; redis-benchmark sending the library's own
    # EVALSHA at the same concurrency, in the Redis columns.
    def rb_ns(c, p):
        r = rb_by.get((c, p))
        return 1e9 / r["rps"] if r and r["rps"] else None
    references = [
        ("floor:clock+CAS", [cas_floor, None, None, None, None]),
        ("naive:map+mutex", [ns("BM_Naive_UnorderedMapMutex_OneKey"),
                             ns("BM_Naive_UnorderedMapMutex_MillionKeys"), None, None, None]),
        ("redis-benchmark", [None, None, rb_ns(1, 1), rb_ns(32, 1), rb_ns(32, 16)]),
    ]
    dat = os.path.join(out, "latest.dat")
    with open(dat, "w") as f:
        f.write("algorithm " + " ".join(f'"{s}"' for s, _ in series) + "\n")
        rows = references + [(a, [get(a) for _, get in series]) for a in ALGORITHMS]
        for label, vals in rows:
            f.write(label + " " + " ".join("NaN" if v is None else f"{v:.1f}" for v in vals) + "\n")
    if shutil.which("gnuplot"):
        script = f"""
set terminal pngcairo size 1300,600 noenhanced font ",11"
set output "{os.path.join(out, 'latest.png')}"
set title "ns per decision (log scale; lower is better) - {meta.get('date')}, {meta.get('cpu')}, {meta.get('cores')} cores, load {meta.get('load_start')}"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set logscale y
set yrange [10:*]
set ylabel "ns per decision"
set grid ytics
set key top left
set xtics rotate by -20
plot for [i=2:{len(series) + 1}] "{dat}" using i:xtic(1) title columnheader(i)
"""
        try:
            subprocess.run(["gnuplot"], input=script, text=True, check=True,
                           stderr=subprocess.PIPE)
        except (subprocess.CalledProcessError, OSError) as e:
            print(f"report.py: gnuplot failed: {e}", file=sys.stderr)
    os.remove(dat)


if __name__ == "__main__":
    main()
