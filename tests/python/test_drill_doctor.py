"""`tensile drill` and `tensile doctor` as CI runs them: the drill on the CPU
(table and JSON) handles every injected fault with 0 crashed, 0 wrong and 0
leaked; doctor gives the CPU the verdict `ready`, and with a kernel broken
through TSL_FAULT it lists that kernel with its error and says `degraded`."""
import json
import os
import re
import subprocess
import sys

BIN = os.path.join(os.environ.get("TSL_BIN", "build/bin"), "tensile")
passed = failed = 0
SUMMARY = re.compile(r"^drills: (\d+) injected, (\d+) handled, (\d+) crashed, (\d+) wrong results, (\d+) leaked$")
CLASSES = ["retry", "lost", "nobuf", "kernel", "alloc", "abort"]


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
        print("ok  ", what)
    else:
        failed += 1
        print("FAIL", what, file=sys.stderr)


def run(*args, env=None, timeout=300):
    e = dict(os.environ)
    e.pop("TSL_FAULT", None)
    if env:
        e.update(env)
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=timeout, env=e)


def jsonl(out):
    rows = []
    for line in out.splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            check(False, "line is JSON: %r" % line)
    return rows


# ---- drill: the table ---------------------------------------------------------
r = run("drill", "--backend", "cpu")
check(r.returncode == 0, "drill --backend cpu exits 0 (stderr: %s)" % r.stderr[-2000:])
lines = r.stdout.strip().splitlines()
m = SUMMARY.match(lines[-1]) if lines else None
check(m is not None, "the last line is the summary: %r" % (lines[-1] if lines else ""))
if m:
    inj, han, cra, wro, lea = map(int, m.groups())
    check(inj > 0 and inj == han, "injected == handled > 0 (%d, %d)" % (inj, han))
    check(cra == 0 and wro == 0 and lea == 0, "0 crashed, 0 wrong, 0 leaked")
rows = {l.split()[1]: l.split() for l in lines[1:-1] if len(l.split()) == 7 and l.split()[0] == "cpu"}
for c in CLASSES:
    row = rows.get(c)
    check(row is not None and int(row[2]) > 0 and row[2] == row[3], "row for class %s: injected == handled > 0" % c)
# every compute node of a 2-layer graph is an injection point for nobuf and abort
check(rows.get("nobuf") and int(rows["nobuf"][2]) >= 40, "nobuf covers every node and leaf")
check(rows.get("abort") and int(rows["abort"][2]) >= 30, "abort covers every node boundary")

# ---- drill: JSON ----------------------------------------------------------------
r = run("drill", "--backend", "cpu", "--json")
check(r.returncode == 0, "drill --json exits 0")
objs = jsonl(r.stdout)
per = [o for o in objs if "class" in o]
summ = [o for o in objs if "summary" in o]
check(sorted(o["class"] for o in per) == sorted(CLASSES), "one JSON object per class")
check(len(summ) == 1, "one summary object")
if summ:
    s = summ[0]
    check(s["injected"] > 0 and s["injected"] == s["handled"], "JSON: injected == handled > 0")
    check(s["crashed"] == 0 and s["wrong"] == 0 and s["leaked"] == 0, "JSON: 0 crashed, 0 wrong, 0 leaked")
    check(SUMMARY.match(s["summary"]) is not None, "JSON summary carries the summary line")
    check(sum(o["injected"] for o in per) == s["injected"], "class rows add up to the summary")
    check(s["ok"] is True, "JSON summary says ok")

r = run("drill", "--backend", "cpu", "--quick", "--json")
q = [o for o in jsonl(r.stdout) if "summary" in o]
check(r.returncode == 0 and q and 0 < q[0]["injected"] < summ[0]["injected"], "--quick injects fewer faults")

r = run("drill", "--backend", "nosuch")
check(r.returncode == 2, "an unknown backend is a usage error")
r = run("drill", "--backend", "vulkan")
if "not built" in r.stderr:
    check(r.returncode == 2 and "vulkan backend not built" in r.stderr, "vulkan not built: exit 2 with a clear message")

# ---- doctor ---------------------------------------------------------------------
r = run("doctor")
check(r.returncode == 0, "doctor exits 0")
check(re.search(r"^cpu: ready$", r.stdout, re.M) is not None, "doctor: cpu: ready")
check("SIMD kernels" in r.stdout and "threads" in r.stdout, "doctor lists threads and the SIMD set")
m = re.search(r"^  cpu: (\d+) built, (\d+) failed$", r.stdout, re.M)
check(m is not None and int(m.group(1)) > 0 and m.group(2) == "0", "doctor: every cpu kernel built")

r = run("doctor", "--json")
check(r.returncode == 0, "doctor --json exits 0")
try:
    d = json.loads(r.stdout)
except json.JSONDecodeError:
    d = {}
    check(False, "doctor --json prints one JSON object")
cpu = [b for b in d.get("backends", []) if b.get("name") == "cpu"]
check(len(cpu) == 1, "doctor --json lists the cpu backend")
kernel = None
if cpu:
    b = cpu[0]
    check(b["verdict"] == "ready" and b["line"] == "cpu: ready", "doctor --json: cpu verdict ready")
    check(b["kernels_built"] > 0 and b["kernels_failed"] == 0, "doctor --json: kernels built")
    check(b["drill"] and b["drill"]["injected"] == b["drill"]["handled"] > 0, "doctor --json: the short drill handled all")

# a kernel broken through the environment: listed with its error, verdict degraded.
# The kernel names are the backend's; the drill prints the ones the graph uses.
r = run("drill", "--backend", "cpu", "--quick", "-v")
names = re.findall(r"kernel@name=([A-Za-z0-9_]+),times=1", r.stdout)
check(len(names) > 0, "drill -v names the kernels it broke")
kernel = next((n for n in names if "soft_max" in n), names[0] if names else "cpu_soft_max_f32_f32")
r = run("doctor", env={"TSL_FAULT": "kernel@name=" + kernel})
check(r.returncode == 0, "doctor with a broken kernel still exits 0 (degraded is usable)")
check(re.search(r"^    FAILED %s: .*could not be built" % re.escape(kernel), r.stdout, re.M) is not None,
      "doctor lists the failed kernel with its error")
check(re.search(r"^cpu: degraded: .*%s" % re.escape(kernel), r.stdout, re.M) is not None,
      "doctor: cpu: degraded, naming the kernel")
check(re.search(r"^  cpu: drills: (\d+) injected, \1 handled, 0 crashed, 0 wrong results, 0 leaked$", r.stdout, re.M)
      is not None, "the drill ignores TSL_FAULT")
r = run("doctor", "--json", env={"TSL_FAULT": "kernel@name=" + kernel})
try:
    d = json.loads(r.stdout)
    b = [b for b in d["backends"] if b["name"] == "cpu"][0]
    check(b["verdict"] == "degraded" and b["kernels_failed"] == 1, "doctor --json: degraded, one kernel failed")
    check(b["kernel_failures"][0]["kernel"] == kernel and "injected" in b["kernel_failures"][0]["error"],
          "doctor --json: the failure carries the driver's text")
except (json.JSONDecodeError, KeyError, IndexError):
    check(False, "doctor --json with a broken kernel")

# a malformed TSL_FAULT makes the backend unusable, and doctor says why
r = run("doctor", env={"TSL_FAULT": "nosuchfault"})
check(r.returncode == 1 and re.search(r"^cpu: unusable: .*TSL_FAULT", r.stdout, re.M) is not None,
      "doctor: a backend that cannot be made is unusable, with the reason")

print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
