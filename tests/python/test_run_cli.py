"""`tensile run` end to end on a tiny generated model.

- the same seed gives the same text twice; other seeds give other text;
- the stderr summary line has the prompt and generation counts and rates;
- --json has the prompt and generated tokens, the text (equal to the plain
  run's) and timings;
- --temp 0 is greedy: the same text for any seed, the same as --top-k 1,
  and each generated token is the argmax of the numpy reference
  (ref_forward.py) over the prompt and the tokens before it, wherever the
  reference's top two logits are further apart than the F32 tolerance;
- the prompt tokens of --json equal `tensile eval --ids-only --text`;
- a missing, empty, garbage, truncated or wrong-architecture model file
  exits non-zero with a message naming the problem: no signal, no abort,
  no sanitizer report, no Python traceback;
- TSL_FAULT='retry@compute=2' (one transient refusal) still gives the clean
  run's text (the retry policy runs the compute again); RETRY on every
  compute ends, after the policy's attempts, with the RETRY record line and
  a non-zero exit; TSL_FAULT='nobuf@compute=3' (a FAILED compute) prints
  the error record line and exits non-zero; TSL_FAULT='lost@compute=4' (the
  device lost mid-generation) is recovered and gives the clean run's text.

The same on the Vulkan backend (lavapipe here and in CI), where the weights
live in device memory: --backend vulkan runs, greedy tokens are the
reference's argmax, a seed gives the same text twice, and the faults are
handled the same way. A lost device is tested twice, because recovery
restores the weights two ways (src/model/weights.c): a file whose tensor
offsets are multiples of the device's buffer alignment (`tensile
gen-model`, 256) is held in the file's layout and restored by the backend
from the mapping; a file with GGUF's default 32 (the gguf package's, as
most files) is packed, and the model uploads it again itself. Both must
give the fault-free run's text. Whether a Vulkan device is there is asked
of `tensile run --backend vulkan`; TSL_REQUIRE_VULKAN=1 (CI) makes a
missing device a failure.

Prints "N passed, N failed" and exits non-zero on any failure.
"""
import codecs
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))

import gen_test_models as gtm  # noqa: E402
import ref_forward  # noqa: E402

BIN = os.environ.get("TSL_BIN", os.path.join(ROOT, "build", "bin"))
TENSILE = os.path.join(BIN, "tensile")
PROMPT = "The quick brown fox, 你好, Grüße"
N_GEN = 16
GREEDY_TOL = 1e-3  # the F32 logits tolerance of test_logits.py
# tsl_error_format's line, "backend (device): STATUS[ at node N OP 'tensor']:
# message - hint" (the device name may hold parentheses itself).
RECORD_RE = {
    "RETRY": r"[\w.\-]+ \(.+\): RETRY: .+ - .+",
    "FAILED": r"[\w.\-]+ \(.+\): FAILED at node \d+ [A-Z_]+ '[^']+': .+ - .+",
}
# Through the scheduler (a device context) the record also names the split,
# and a refused submission the node whose command buffer it was.
VK_RECORD_RE = {
    "RETRY": r"[\w.\-]+ \(.+\): RETRY( in split \d+)?( at node \d+ [A-Z_]+ '[^']+')?: .+ - .+",
    "FAILED": r"[\w.\-]+ \(.+\): FAILED( in split \d+)? at node \d+ [A-Z_]+ '[^']+': .+ - .+",
}
SUMMARY_RE = re.compile(r"prompt: (\d+) tokens?, [0-9.]+ tok/s; generation: (\d+) tokens?, [0-9.]+ tok/s")

passed = failed = 0

# JSON output replaces each byte of an invalid UTF-8 sequence with U+FFFD.
codecs.register_error("tsl-per-byte", lambda e: ("\ufffd" * (e.end - e.start), e.end))


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL", what, flush=True)
    return cond


def tensile(*args, env_extra=None, timeout=120):
    env = dict(os.environ)
    env.pop("TSL_FAULT", None)
    if env_extra:
        env.update(env_extra)
    try:
        r = subprocess.run([TENSILE, *args], capture_output=True, timeout=timeout, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r


def desc(r):
    if r is None:
        return "timed out"
    return f"exit {r.returncode}; stderr: {r.stderr.decode(errors='replace').strip()[-300:]!r}"


def run(model, *extra, env_extra=None):
    return tensile("run", "-m", model, "-p", PROMPT, "-n", str(N_GEN), "--threads", "2", *extra,
                   env_extra=env_extra)


def clean_exit_failure(r, what, must_say=None):
    """A failure the user can act on: non-zero status, not a crash."""
    if not check(r is not None, f"{what}: no answer within the timeout"):
        return
    err = (r.stdout + r.stderr).decode(errors="replace")
    check(0 < r.returncode < 128,
          f"{what}: exit status {r.returncode} (want a clean non-zero exit)")
    for bad in ("Traceback", "Sanitizer", "Segmentation fault", "core dumped", "Assertion"):
        check(bad not in err, f"{what}: output contains {bad!r}: {err[-300:]!r}")
    check(len(r.stderr.strip()) > 0, f"{what}: nothing on stderr")
    if must_say:
        check(re.search(must_say, err, re.I | re.M) is not None,
              f"{what}: message does not match {must_say!r}: {err.strip()[-300:]!r}")


def json_of(r, what):
    try:
        return json.loads(r.stdout.decode())
    except (ValueError, UnicodeDecodeError) as e:
        check(False, f"{what}: stdout is not one JSON object ({e}): {r.stdout[:200]!r}")
        return None


def int_list(v):
    return isinstance(v, list) and all(isinstance(t, int) for t in v)


def main():
    r = tensile("run", "--help")
    if r is None or r.returncode != 0:
        print(f"FAIL `{TENSILE} run --help` does not run: the run command is missing")
        print("0 passed, 1 failed")
        return 1

    with tempfile.TemporaryDirectory(prefix="tsl-run-") as tmp:
        model = gtm.ensure_model(tmp, "llama", "f32")
        ref_model = ref_forward.load(model)

        # --- determinism and the summary line
        a, b = run(model, "--seed", "3"), run(model, "--seed", "3")
        if check(a is not None and a.returncode == 0, f"run --seed 3: {desc(a)}") and \
                check(b is not None and b.returncode == 0, f"second run --seed 3: {desc(b)}"):
            check(len(a.stdout.strip()) > 0, "run printed no text")
            check(a.stdout == b.stdout, f"same seed, different text: {a.stdout!r} vs {b.stdout!r}")
            m = SUMMARY_RE.search(a.stderr.decode(errors="replace"))
            if check(m is not None, f"no summary line on stderr: {a.stderr[-300:]!r}"):
                check(int(m.group(1)) > 0 and 1 <= int(m.group(2)) <= N_GEN,
                      f"summary counts: prompt {m.group(1)}, generation {m.group(2)}")
            others = [run(model, "--seed", s) for s in ("4", "5", "6")]
            check(any(o is not None and o.returncode == 0 and o.stdout != a.stdout for o in others),
                  "seeds 3, 4, 5 and 6 all give the same text: the seed is not used")

        # --- --json
        j = None
        r = run(model, "--seed", "3", "--json")
        if check(r is not None and r.returncode == 0, f"run --json: {desc(r)}"):
            j = json_of(r, "run --json")
        prompt_ids = gen_ids = None
        if j is not None and check(isinstance(j, dict), "run --json: not an object"):
            prompt_ids = j.get("prompt_tokens")
            gen_ids = j.get("tokens")
            check(int_list(prompt_ids) and len(prompt_ids) > 0, f"--json prompt_tokens: {prompt_ids!r}")
            check(int_list(gen_ids) and 1 <= len(gen_ids) <= N_GEN, f"--json tokens: {gen_ids!r}")
            # timings: counts, seconds and rates of both phases
            num = {k: j.get(k) for k in ("prompt_n", "prompt_s", "prompt_tok_s", "gen_n", "gen_s", "gen_tok_s")}
            if check(all(isinstance(v, (int, float)) and v >= 0 for v in num.values()), f"--json timings: {num}"):
                check(num["prompt_n"] == len(prompt_ids or []) and num["gen_n"] == len(gen_ids or []),
                      f"--json counts {num['prompt_n']}/{num['gen_n']} differ from the token lists")
                check(num["prompt_s"] > 0 and num["gen_s"] > 0, f"--json times: {num}")
            if a is not None and a.returncode == 0:
                check(a.stdout.endswith(b"\n") and
                      a.stdout[:-1].decode("utf-8", errors="tsl-per-byte") == j.get("text"),
                      f"--json text {j.get('text')!r} differs from the plain run's {a.stdout!r}")

        # --- the prompt's tokens as eval tokenizes them
        e = tensile("eval", "-m", model, "--ids-only", "--text", PROMPT)
        if check(e is not None and e.returncode == 0, f"eval --ids-only: {desc(e)}"):
            ids = [int(x) for x in e.stdout.decode().replace(",", " ").split()]
            check(ids == prompt_ids, f"eval --ids-only gives {ids}, run --json prompt_tokens {prompt_ids}")
            # The vocabulary's own tokenizer (HF, with Llama 3's BOS template).
            hf = gtm.hf_tokenizer(gtm.VARIANTS["llama"]["vocab"]).encode(PROMPT).ids
            check(ids == hf, f"eval --ids-only gives {ids}, HF tokenizers {hf}")

        # --- greedy
        g1 = run(model, "--temp", "0", "--seed", "1", "--json")
        g2 = run(model, "--temp", "0", "--seed", "2", "--json")
        k1 = run(model, "--top-k", "1", "--seed", "7", "--json")
        if all(check(x is not None and x.returncode == 0, f"greedy run: {desc(x)}") for x in (g1, g2, k1)):
            j1, j2, jk = json_of(g1, "greedy"), json_of(g2, "greedy"), json_of(k1, "top-k 1")
            if j1 and j2 and jk:
                check(j1.get("tokens") == j2.get("tokens"), "--temp 0 depends on the seed")
                check(j1.get("tokens") == jk.get("tokens"), "--temp 0 and --top-k 1 differ")
                p, gen = j1.get("prompt_tokens"), j1.get("tokens")
                if int_list(p) and int_list(gen) and gen:
                    logits = ref_forward.forward(ref_model, p + gen)
                    n_checked = 0
                    for i, tok in enumerate(gen):
                        row = logits[len(p) - 1 + i]
                        order = np.argsort(row)[::-1]
                        margin = row[order[0]] - row[order[1]]
                        if margin <= 2 * GREEDY_TOL * np.abs(row).max():
                            # too close to call: the runtime may pick either, and
                            # the sequences may part here; stop comparing.
                            check(tok in (int(order[0]), int(order[1])),
                                  f"greedy token {i}: {tok} is neither of the reference's top two")
                            break
                        check(tok == int(order[0]),
                              f"greedy token {i}: runtime {tok}, reference argmax {int(order[0])}")
                        n_checked += 1
                    print(f"  greedy: {n_checked} of {len(gen)} tokens checked against the reference", flush=True)
                    check(n_checked >= min(4, len(gen)), "too few greedy tokens could be checked")
            # several decode steps to a graph (here 16 tokens are 1 + 8 + 7
            # and 1 + 5 + 5 + 5) give what one a graph (the default) gives; a
            # device lost in the second 8-step graph is recovered and gives
            # them too
            if j1:
                greedy_steps_agree(model, j1, run, "greedy")
        clean_exit_failure(run(model, "--temp", "0", "--steps", "0"), "--steps 0", r"--steps")
        clean_exit_failure(run(model, "--temp", "0", "--steps", "33"), "--steps 33", r"--steps.*1\.\.32")

        # --- bad model files
        clean_exit_failure(run(os.path.join(tmp, "missing.gguf")), "missing model file", r"missing\.gguf")
        empty = os.path.join(tmp, "empty.gguf")
        open(empty, "wb").close()
        clean_exit_failure(run(empty), "empty model file", r"empty\.gguf")
        garbage = os.path.join(tmp, "garbage.gguf")
        with open(garbage, "wb") as f:
            f.write(np.random.default_rng(5).integers(0, 256, 4096, dtype=np.uint8).tobytes())
        clean_exit_failure(run(garbage), "garbage model file", r"magic|gguf")
        trunc = os.path.join(tmp, "truncated.gguf")
        with open(model, "rb") as f:
            data = f.read()
        with open(trunc, "wb") as f:
            f.write(data[:len(data) // 2])
        clean_exit_failure(run(trunc), "truncated model file", r"truncated\.gguf")
        other = os.path.join(tmp, "other-arch.gguf")
        shutil.copy(model, other)
        with open(other, "r+b") as f:
            blob = f.read()
            at = blob.find(b"llama")  # general.architecture's value comes first
            f.seek(at)
            f.write(b"gpt_x")
        clean_exit_failure(run(other), "unsupported architecture", r"gpt_x")

        # --- faults
        if a is not None and a.returncode == 0:
            r = run(model, "--seed", "3", env_extra={"TSL_FAULT": "retry@compute=2"})
            if check(r is not None and r.returncode == 0, f"retry@compute=2: {desc(r)}"):
                check(r.stdout == a.stdout, f"retry@compute=2 changed the text: {r.stdout!r} vs {a.stdout!r}")
            # a lost device mid-generation: the run recovers the backend,
            # rebuilds its KV cache from its tokens and goes on (FAULTS.md 8)
            r = run(model, "--seed", "3", env_extra={"TSL_FAULT": "lost@compute=4"})
            if check(r is not None and r.returncode == 0, f"lost@compute=4: {desc(r)}"):
                check(r.stdout == a.stdout, f"lost@compute=4 changed the text: {r.stdout!r} vs {a.stdout!r}")
        r = run(model, "--seed", "3", env_extra={"TSL_FAULT": "retry"})
        clean_exit_failure(r, "RETRY on every compute", RECORD_RE["RETRY"])
        r = run(model, "--seed", "3", env_extra={"TSL_FAULT": "nobuf@compute=3"})
        clean_exit_failure(r, "nobuf@compute=3", RECORD_RE["FAILED"])

        vulkan_part(tmp, model, ref_model)

    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


def greedy_steps_agree(model, j, runner, what):
    """--steps 8 and --steps 5 give the tokens of the default (one step a
    graph), and so does a run of 8 steps a graph whose device is lost in
    its third compute (the second 8-step graph): recovered, the cache
    rebuilt."""
    for extra, env, name in ((("--steps", "8"), None, "--steps 8"), (("--steps", "5"), None, "--steps 5"),
                             (("--steps", "8"), {"TSL_FAULT": "lost@compute=3"}, "--steps 8, lost@compute=3")):
        r = runner(model, "--temp", "0", "--json", *extra, env_extra=env)
        if not check(r is not None and r.returncode == 0, f"{what} {name}: {desc(r)}"):
            continue
        o = json_of(r, f"{what} {name}")
        if o is not None:
            check(o.get("tokens") == j.get("tokens"),
                  f"{what} {name}: tokens {o.get('tokens')} differ from the default's {j.get('tokens')}")
        if env:
            check(re.search(r"device recovered", r.stderr.decode(errors="replace")) is not None,
                  f"{what} {name}: no recovery on stderr")


def greedy_matches_reference(ref_model, j, what):
    """Each greedy token of a --json run is the reference's argmax where the
    reference's top two are further apart than the F32 tolerance."""
    p, gen = j.get("prompt_tokens"), j.get("tokens")
    if not (int_list(p) and int_list(gen) and gen):
        check(False, f"{what}: no tokens: {j!r}"[:300])
        return
    logits = ref_forward.forward(ref_model, p + gen)
    n_checked = 0
    for i, tok in enumerate(gen):
        row = logits[len(p) - 1 + i]
        order = np.argsort(row)[::-1]
        if row[order[0]] - row[order[1]] <= 2 * GREEDY_TOL * np.abs(row).max():
            check(tok in (int(order[0]), int(order[1])), f"{what} token {i}: {tok} is neither of the top two")
            break
        check(tok == int(order[0]), f"{what} token {i}: runtime {tok}, reference argmax {int(order[0])}")
        n_checked += 1
    print(f"  {what}: {n_checked} of {len(gen)} tokens checked against the reference", flush=True)
    check(n_checked >= min(4, len(gen)), f"{what}: too few greedy tokens could be checked")


def vulkan_part(tmp, model, ref_model):
    probe = run(model, "--backend", "vulkan", "-n", "1")
    required = os.environ.get("TSL_REQUIRE_VULKAN", "") not in ("", "0")
    if probe is not None and probe.returncode != 0 and \
            re.search(r"no Vulkan device", probe.stderr.decode(errors="replace")):
        if check(not required, f"TSL_REQUIRE_VULKAN is set but there is no Vulkan device: {desc(probe)}"):
            print("vulkan: not run (no Vulkan device)", flush=True)
        return
    if not check(probe is not None and probe.returncode == 0, f"run --backend vulkan: {desc(probe)}"):
        return

    def vk(m, *extra, env_extra=None):
        return run(m, "--backend", "vulkan", *extra, env_extra=env_extra)

    # greedy on the device: the reference's argmax
    g = vk(model, "--temp", "0", "--json")
    if check(g is not None and g.returncode == 0, f"vulkan greedy run: {desc(g)}"):
        j = json_of(g, "vulkan greedy")
        if j is not None:
            greedy_matches_reference(ref_model, j, "vulkan greedy")
            greedy_steps_agree(model, j, vk, "vulkan greedy")

    # a file in the device's alignment (file layout) and one in GGUF's
    # default (packed: Q8_0 rows of 68 bytes put tensors off 256-byte
    # boundaries): the same fault handling for both
    files = []
    for layout, align, restore in (("packed", "32", r"uploaded again"),
                                   ("file layout", "256", r"[1-9]\d* persistent buffer\(s\) restored")):
        f = os.path.join(tmp, f"tiny-q8_0-align{align}.gguf")
        r = tensile("gen-model", "--shape", "tiny", "--type", "q8_0", "--align", align, "-o", f)
        if check(r is not None and r.returncode == 0, f"gen-model --align {align}: {desc(r)}"):
            files.append((f, layout, restore))
    for m, layout, restore in files:
        a = vk(m, "--seed", "3")
        b = vk(m, "--seed", "3")
        if not (check(a is not None and a.returncode == 0, f"vulkan {layout}: {desc(a)}") and
                check(b is not None and b.returncode == 0, f"vulkan {layout} again: {desc(b)}")):
            continue
        check(len(a.stdout.strip()) > 0, f"vulkan {layout}: no text")
        check(a.stdout == b.stdout, f"vulkan {layout}: same seed, different text: {a.stdout!r} vs {b.stdout!r}")
        r = vk(m, "--seed", "3", env_extra={"TSL_FAULT": "retry@compute=2"})
        if check(r is not None and r.returncode == 0, f"vulkan {layout} retry@compute=2: {desc(r)}"):
            check(r.stdout == a.stdout, f"vulkan {layout} retry@compute=2 changed the text")
        r = vk(m, "--seed", "3", env_extra={"TSL_FAULT": "lost@compute=4", "TSL_LOG": "info"})
        if check(r is not None and r.returncode == 0, f"vulkan {layout} lost@compute=4: {desc(r)}"):
            check(r.stdout == a.stdout,
                  f"vulkan {layout} lost@compute=4 changed the text: {r.stdout!r} vs {a.stdout!r}")
            err = r.stderr.decode(errors="replace")
            check(re.search(r"DEVICE_LOST", err) is not None and re.search(r"device recovered", err) is not None,
                  f"vulkan {layout} lost@compute=4: no loss and recovery on stderr: {err[-400:]!r}")
            check(re.search(restore, err) is not None,
                  f"vulkan {layout} lost@compute=4: the weights were not {restore!r}: {err[-600:]!r}")
        r = vk(m, "--seed", "3", env_extra={"TSL_FAULT": "nobuf@compute=3"})
        clean_exit_failure(r, f"vulkan {layout} nobuf@compute=3", VK_RECORD_RE["FAILED"])
    r = vk(model, "--seed", "3", env_extra={"TSL_FAULT": "retry"})
    clean_exit_failure(r, "vulkan: RETRY on every compute", VK_RECORD_RE["RETRY"])

    # bench model on the device: its own copy ceiling and the per-token split
    if files:
        r = tensile("bench", "model", "-m", files[0][0], "--backend", "vulkan", "--prompt", "16", "--gen", "8",
                    "--copy-mib", "8", "--json", timeout=300)
        if check(r is not None and r.returncode == 0, f"bench model --backend vulkan: {desc(r)}"):
            j = json_of(r, "bench model --backend vulkan")
            if j is not None:
                t = j.get("per_token") or {}
                check(j.get("backend_name", "").startswith("vulkan") and j.get("copy_ceiling", "").startswith("device"),
                      f"bench model: not the device's ceiling: {j!r}"[:300])
                check(all(isinstance(j.get(k), (int, float)) and j[k] > 0
                          for k in ("prompt_tok_s", "gen_tok_s", "copy_gbs", "bw_ratio")), f"bench model: {j!r}"[:300])
                check(j.get("copy_bytes") == 2 * (8 << 20), f"bench model: copy_bytes {j.get('copy_bytes')}")
                check(j.get("weight_buffers") == 1, f"bench model: {j.get('weight_buffers')} weight buffers")
                check(j.get("greedy") == "graph" and j.get("steps") == 1, f"bench model: greedy/steps: {j!r}"[:300])
                # a tiny llama: 2 layers of ~21 kernels, and one split (all on the device)
                check(t.get("splits") == 1 and 20 <= t.get("dispatches", 0) <= 80 and t.get("barriers", -1) >= 0,
                      f"bench model per token: {t!r}")
                check(0 < t.get("host_ms", 0) <= t.get("wall_ms", 0) and t.get("gpu_ms", 0) > 0,
                      f"bench model per-token times: {t!r}")
                # the host's parts add up to its time; the GPU's time and the wait fall within the compute
                # call, and that within the wall time. (Not host + GPU + wait <= wall: on a CPU device,
                # lavapipe, the device may start before the host's submit returns, so the two overlap,
                # more so on a loaded machine.)
                parts = sum(t.get(k, -1) for k in ("graph_ms", "inputs_ms", "sched_ms", "resolve_ms", "encode_submit_ms"))
                check(t.get("resolve_ms", -1) > 0 and t.get("wait_ms", -1) >= 0 and abs(parts - t["host_ms"]) < 1e-3
                      and t["gpu_ms"] + t["wait_ms"] <= t.get("compute_ms", 0) * 1.01 + 1e-3
                      and t.get("compute_ms", 0) <= t["wall_ms"] * 1.01 + 1e-3,
                      f"bench model per-token split: {t!r}")


if __name__ == "__main__":
    sys.exit(main())
