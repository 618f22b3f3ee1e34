"""Start-up time of the `radixsim` command (a benchmark, not a test).

Times `radixsim --help` and a replay of a two-request trace, each in a fresh process, and
prints the median wall time of --repeat runs next to a bare `python -c pass`, then the
slowest imports of `--help` (`python -X importtime`, cumulative microseconds).

    python benchmarks/bench_startup.py [--repeat 5] [--top 8]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def wall(cmd: list, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def slowest_imports(top: int) -> list[tuple[int, str]]:
    err = subprocess.run([sys.executable, "-X", "importtime", "-m", "radixsim", "--help"],
                         capture_output=True, text=True, check=True).stderr
    rows = []
    for line in err.splitlines()[1:]:
        _, cumulative, name = line.split("|")
        rows.append((int(cumulative), name.rstrip()))
    return sorted(rows, reverse=True)[:top]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--top", type=int, default=8)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "t.jsonl"
        trace.write_text('{"hash_ids": [1, 2], "output_length": 2}\n{"hash_ids": [1, 3], "output_length": 2}\n')
        cases = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "radixsim --help": [sys.executable, "-m", "radixsim", "--help"],
            "radixsim replay (2 requests)": [sys.executable, "-m", "radixsim", "replay", str(trace), "--block-size",
                                             "4", "--out", str(Path(tmp) / "out"), "--no-progress"],
        }
        print(f"{'command':<30} {'median s':>9}  (of {args.repeat})")
        for name, cmd in cases.items():
            print(f"{name:<30} {wall(cmd, args.repeat):9.3f}", flush=True)
    print("\nslowest imports of radixsim --help (cumulative us):")
    for us, name in slowest_imports(args.top):
        print(f"{us:>10}  {name}")


if __name__ == "__main__":
    main()
