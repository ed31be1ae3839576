"""The CLI as a user meets it: `tensile version`, `tensile demo`, and
`tensile bench ops --json --quick`, whose every stdout line must be one JSON
object with the documented fields and ratios to ceilings measured in the run."""
import json
import os
import subprocess
import sys

BIN = os.path.join(os.environ.get("TSL_BIN", "build/bin"), "tensile")
passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
        print("ok  ", what)
    else:
        failed += 1
        print("FAIL", what, file=sys.stderr)


def run(*args, timeout=300):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=timeout)


r = run("version")
check(r.returncode == 0 and r.stdout.startswith("tensile "), "version prints 'tensile <version>'")

r = run("no-such-command")
check(r.returncode == 2 and "unknown command" in r.stderr, "unknown command exits 2 and says so")

r = run("demo", "--threads", "2")
check(r.returncode == 0, "demo exits 0")
check("result" in r.stdout and "timing" in r.stdout and "ms per compute" in r.stdout, "demo prints result and timing")
r2 = run("demo", "--threads", "1")
line = lambda out: [l for l in out.splitlines() if l.startswith("result")]
check(r2.returncode == 0 and len(line(r.stdout)) == 1, "demo runs on one thread")

r = run("bench", "ops", "--json", "--quick", timeout=600)
check(r.returncode == 0, "bench ops --json --quick exits 0")
rows = []
for l in r.stdout.splitlines():
    try:
        rows.append(json.loads(l))
    except json.JSONDecodeError:
        check(False, "bench line is JSON: %r" % l)
ops = {row.get("op") for row in rows}
check("ceiling_copy" in ops and "ceiling_fma" in ops, "bench reports both ceilings")
check(any(row.get("op") == "mul_mat" for row in rows), "bench has mul_mat rows")
need = {"op", "type", "shape", "threads", "seconds", "gflops", "gbs"}
for row in rows:
    if row.get("op", "").startswith("ceiling"):
        continue
    missing = need - set(row)
    check(not missing, "row %s/%s has fields %s" % (row.get("op"), row.get("type"), sorted(missing) or "all"))
    check(row.get("seconds", 0) > 0, "row %s/%s has a positive time" % (row.get("op"), row.get("type")))
    check(("flops_ratio" in row) or ("bw_ratio" in row), "row %s/%s has a ratio to a ceiling" % (row.get("op"), row.get("type")))

print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
