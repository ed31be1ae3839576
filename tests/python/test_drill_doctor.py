"""`tensile drill` and `tensile doctor` as CI runs them: the drill on the CPU
(table and JSON) handles every injected fault with 0 crashed, 0 wrong and 0
leaked; doctor gives the CPU the verdict `ready`, and with a kernel broken
through TSL_FAULT it lists that kernel with its error and says `degraded`.
With a Vulkan device (lavapipe in CI) the same holds for `--backend vulkan`
and `--backend all`, and doctor says `vulkan0: ready`; with
TSL_REQUIRE_VULKAN=1 (CI) a build or machine without one is a failure, not a
skip. A planted leak (the hidden --plant-leak) must be counted, so the
leak accounting cannot pass by counting nothing."""
import json
import os
import re
import subprocess
import sys

BIN = os.path.join(os.environ.get("TSL_BIN", "build/bin"), "tensile")
passed = failed = 0
SUMMARY = re.compile(r"^drills: (\d+) injected, (\d+) handled, (\d+) crashed, (\d+) wrong results, (\d+) leaked$")
CLASSES = ["retry", "lost", "nobuf", "kernel", "alloc", "abort"]
# a device lost where a copy's completion is waited for: GPU backends only (the
# CPU waits for no copy, and its drill has no such row)
VK_CLASSES = CLASSES + ["copylost"]


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


def summary(out):
    """The counts of the summary line (the last line of the table), or None."""
    lines = out.strip().splitlines()
    m = SUMMARY.match(lines[-1]) if lines else None
    return tuple(map(int, m.groups())) if m else None


def table_rows(out, backend):
    """class -> [backend, class, injected, handled, crashed, wrong, leaked] for one backend."""
    rows = {}
    for l in out.strip().splitlines():
        f = l.split()
        if len(f) == 7 and f[0] == backend and f[2].isdigit():
            rows[f[1]] = [f[0], f[1]] + [int(x) for x in f[2:]]
    return rows


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
check("copylost" not in rows, "the CPU drill has no copylost row")
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

# ---- leak accounting: a planted leak is counted --------------------------------------
r = run("drill", "--backend", "cpu", "--quick", "--plant-leak")
s = summary(r.stdout)
check(r.returncode == 1 and s is not None and s[4] == 1 and s[2] == 0 and s[3] == 0,
      "cpu: a buffer planted in a kernel row is reported leaked, once (%s)" % (s,))
k = table_rows(r.stdout, "cpu").get("kernel")
check(k is not None and k[6] == 1 and k[3] == k[2] - 1, "cpu: the planted leak is the kernel row's")

# ---- doctor ---------------------------------------------------------------------
# (one run of each form; the Vulkan checks below read them too)
doc_text = run("doctor")
r = doc_text
check(r.returncode == 0, "doctor exits 0")
check(re.search(r"^cpu: ready$", r.stdout, re.M) is not None, "doctor: cpu: ready")
check("SIMD kernels" in r.stdout and "threads" in r.stdout, "doctor lists threads and the SIMD set")
m = re.search(r"^  cpu: (\d+) built, (\d+) failed$", r.stdout, re.M)
check(m is not None and int(m.group(1)) > 0 and m.group(2) == "0", "doctor: every cpu kernel built")

doc_json = run("doctor", "--json")
r = doc_json
check(r.returncode == 0, "doctor --json exits 0")
try:
    d = json.loads(r.stdout)
except json.JSONDecodeError:
    d = {}
    check(False, "doctor --json prints one JSON object")
doc_backends = d.get("backends", [])
cpu = [b for b in doc_backends if b.get("name") == "cpu"]
check(len(cpu) == 1, "doctor --json lists the cpu backend")
kernel = None
if cpu:
    b = cpu[0]
    check(b["verdict"] == "ready" and b["line"] == "cpu: ready", "doctor --json: cpu verdict ready")
    check(b["kernels_built"] > 0 and b["kernels_failed"] == 0, "doctor --json: kernels built")
    check(b["drill"] and b["drill"]["injected"] == b["drill"]["handled"] > 0, "doctor --json: the short drill handled all")

# a kernel broken through the environment: listed with its error, verdict degraded.
# The kernel names are the backend's; the drill prints the ones the graph uses.
# (--backend cpu: the kernel is a CPU one; the Vulkan part would only add time)
r = run("drill", "--backend", "cpu", "--quick", "-v")
names = re.findall(r"kernel@name=([A-Za-z0-9_]+),times=1", r.stdout)
check(len(names) > 0, "drill -v names the kernels it broke")
kernel = next((n for n in names if "soft_max" in n), names[0] if names else "cpu_soft_max_f32_f32")
r = run("doctor", "--backend", "cpu", env={"TSL_FAULT": "kernel@name=" + kernel})
check(r.returncode == 0, "doctor with a broken kernel still exits 0 (degraded is usable)")
check(re.search(r"^    FAILED %s: .*could not be built" % re.escape(kernel), r.stdout, re.M) is not None,
      "doctor lists the failed kernel with its error")
check(re.search(r"^cpu: degraded: .*%s" % re.escape(kernel), r.stdout, re.M) is not None,
      "doctor: cpu: degraded, naming the kernel")
check(re.search(r"^  cpu: drills: (\d+) injected, \1 handled, 0 crashed, 0 wrong results, 0 leaked$", r.stdout, re.M)
      is not None, "the drill ignores TSL_FAULT")
r = run("doctor", "--backend", "cpu", "--json", env={"TSL_FAULT": "kernel@name=" + kernel})
try:
    d = json.loads(r.stdout)
    b = [b for b in d["backends"] if b["name"] == "cpu"][0]
    check(b["verdict"] == "degraded" and b["kernels_failed"] == 1, "doctor --json: degraded, one kernel failed")
    check(b["kernel_failures"][0]["kernel"] == kernel and "injected" in b["kernel_failures"][0]["error"],
          "doctor --json: the failure carries the driver's text")
except (json.JSONDecodeError, KeyError, IndexError):
    check(False, "doctor --json with a broken kernel")

# a malformed TSL_FAULT makes the backend unusable, and doctor says why
r = run("doctor", "--backend", "cpu", env={"TSL_FAULT": "nosuchfault"})
check(r.returncode == 1 and re.search(r"^cpu: unusable: .*TSL_FAULT", r.stdout, re.M) is not None,
      "doctor: a backend that cannot be made is unusable, with the reason")
r = run("doctor", "--backend", "nosuch")
check(r.returncode == 2, "doctor: an unknown backend is a usage error")

# ---- Vulkan ---------------------------------------------------------------------------
# With a device (lavapipe in CI), the drill and doctor must be as clean as on the
# CPU. TSL_REQUIRE_VULKAN=1 (CI) turns a missing backend or device into a failure.
REQUIRE_VK = os.environ.get("TSL_REQUIRE_VULKAN", "") not in ("", "0")
r = run("drill", "--backend", "vulkan")
vk_built = "vulkan backend not built" not in r.stderr
vk_device = any(b.get("kind") == "vulkan" for b in doc_backends)
if not vk_built:
    check(r.returncode == 2, "vulkan not built: exit 2 with a clear message")
    check(not REQUIRE_VK, "TSL_REQUIRE_VULKAN is set but this build has no Vulkan backend")
elif not vk_device:
    check(not REQUIRE_VK, "TSL_REQUIRE_VULKAN is set but doctor found no Vulkan device")
    print("skip  the Vulkan drill: built, but no Vulkan device here")
else:
    check(r.returncode == 0, "drill --backend vulkan exits 0" +
          ("" if r.returncode == 0 else " (stdout: %s; stderr: %s)" % (r.stdout[-3000:], r.stderr[-2000:])))
    s = summary(r.stdout)
    check(s is not None, "vulkan: the last line is the summary")
    if s:
        inj, han, cra, wro, lea = s
        check(inj > 0 and inj == han, "vulkan: injected == handled > 0 (%d, %d)" % (inj, han))
        check(cra == 0 and wro == 0 and lea == 0, "vulkan: 0 crashed, 0 wrong results, 0 leaked")
    rows = table_rows(r.stdout, "vulkan")
    for c in VK_CLASSES:
        row = rows.get(c)
        check(row is not None and row[2] > 0 and row[2] == row[3] and row[4:] == [0, 0, 0],
              "vulkan row for class %s: injected == handled > 0 (%s)" % (c, row))
    # every kernel the graph uses is broken in turn; its ops run on the CPU
    check(rows.get("kernel") and rows["kernel"][2] >= 8, "vulkan: the kernel class breaks every kernel of the graph")
    check(rows.get("nobuf") and rows["nobuf"][2] >= 40, "vulkan: nobuf covers every node and leaf")
    # the copylost rows: uploads found by the next compute, read and set, and a read
    check(rows.get("copylost") and rows["copylost"][2] >= 7, "vulkan: copylost covers every way a copy is found")
    # the one-token pass: the integer-dot mat-vecs' quantized column is an
    # allocation inside a compute (the prompt's graph has none): 2 + 3 rows
    check(rows.get("alloc") and rows["alloc"][2] >= 5,
          "vulkan: alloc covers the decode step's scratch too (%s)" % (rows.get("alloc"),))

    # a planted leak is counted, once; and an ambient TSL_FAULT reaches no drill
    # process (it would make rows wrong)
    r = run("drill", "--backend", "vulkan", "--quick", "--plant-leak",
            env={"TSL_FAULT": "nobuf@compute%2;retry@compute=1"})
    s = summary(r.stdout)
    check(r.returncode == 1 and s is not None and s[4] == 1 and s[2] == 0 and s[3] == 0 and s[0] == s[1] + 1,
          "vulkan: a buffer planted in a kernel row is reported leaked, once, and TSL_FAULT is ignored (%s)" % (s,))
    k = table_rows(r.stdout, "vulkan").get("kernel")
    check(k is not None and k[6] == 1, "vulkan: the planted leak is the kernel row's")

    # all: the parent looks for Vulkan devices (an instance of its own) before it
    # starts the class processes, which must not inherit it
    r = run("drill", "--backend", "all", "--quick", "--json")
    objs = jsonl(r.stdout)
    per = [o for o in objs if "class" in o]
    summ_all = [o for o in objs if "summary" in o]
    check(r.returncode == 0, "drill --backend all exits 0")
    check(sorted((o["backend"], o["class"]) for o in per) ==
          sorted([("cpu", c) for c in CLASSES] + [("vulkan", c) for c in VK_CLASSES]),
          "drill --backend all: one JSON object per backend and class")
    check(len(summ_all) == 1 and summ_all[0]["ok"] is True and summ_all[0]["injected"] == summ_all[0]["handled"] > 0
          and summ_all[0]["crashed"] == summ_all[0]["wrong"] == summ_all[0]["leaked"] == 0,
          "drill --backend all: clean summary")

    t = doc_text.stdout
    check(re.search(r"^vulkan0: ready$", t, re.M) is not None, "doctor: vulkan0: ready (%s)" %
          [l for l in t.splitlines() if l.startswith("vulkan0:")])
    m = re.search(r"^  vulkan0: (\d+) built, (\d+) failed$", t, re.M)
    check(m is not None and int(m.group(1)) > 0 and m.group(2) == "0", "doctor: every vulkan kernel built")
    check(re.search(r"^  vulkan0: drills: (\d+) injected, \1 handled, 0 crashed, 0 wrong results, 0 leaked$",
                    t, re.M) is not None, "doctor: the quick Vulkan drill is clean")
    check(re.search(r"^  vulkan device \d+: ", t, re.M) is not None, "doctor lists the Vulkan device")
    vk = [b for b in doc_backends if b.get("kind") == "vulkan"][0]
    check(vk.get("verdict") == "ready" and vk.get("kernels_failed") == 0 and vk.get("drill")
          and vk["drill"]["injected"] == vk["drill"]["handled"] > 0, "doctor --json: vulkan0 ready, drill clean")

print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
