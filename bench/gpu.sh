#!/bin/bash
# bench/gpu.sh - the GPU runs behind bench/RESULTS.md's Vulkan figures, in one
# go on a machine with a GPU and its Vulkan driver:
#
#   bash bench/gpu.sh BIN TESTS OUT [LAYERDIR]
#
# BIN holds the `tensile` binary, TESTS the test programs (as built in
# build/bin and build/tests), OUT receives every step's log (OUT/NAME.log);
# the console gets them too, whole, so one captured stream has everything. LAYERDIR, when
# given, holds the Khronos validation layer (its explicit_layer.d and
# library), for the validated test pass. Each step is bounded by `timeout`,
# prints a header, and its exit status is collected; the script's own status
# is the number of failed steps. The wild-write hang is not here: it hangs the
# GPU on purpose and runs on its own (tests/vulkan/hang_wild_write.c).
# STEPS="a b ..." in the environment runs only the steps so named.
set -u
BIN=$1 T=$2 OUT=$3 LAYER=${4:-}
mkdir -p "$OUT"
fails=0
step() { # step NAME SECONDS CMD...: run, log to OUT/NAME.log and the console
    local name=$1 secs=$2
    shift 2
    if [ -n "${STEPS:-}" ] && [[ " $STEPS " != *" $name "* ]]; then return 0; fi
    echo "== $name: $*"
    local t0=$(date +%s%N)
    timeout "$secs" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    cat "$OUT/$name.log"
    echo "== $name: exit $rc in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
    [ $rc -eq 0 ] || fails=$((fails + 1))
}

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader 2>/dev/null
step doctor 120 "$BIN/tensile" doctor --backend all

# the matrix-rate ceiling: torch bf16 on the same GPU, same run
REF=$(timeout 120 python3 - <<'PY'
import sys, torch
def rate(n, reps=20):
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
    for _ in range(5): a @ b
    torch.cuda.synchronize()
    e = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    e[0].record()
    for _ in range(reps): a @ b
    e[1].record(); torch.cuda.synchronize()
    return 2 * n**3 * reps / e[0].elapsed_time(e[1]) / 1e9
x = torch.empty(2 << 28, device="cuda", dtype=torch.float32); y = torch.empty_like(x)
for _ in range(3): y.copy_(x)
torch.cuda.synchronize()
e = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
e[0].record()
for _ in range(10): y.copy_(x)
e[1].record(); torch.cuda.synchronize()
print("torch: bf16 8192^3 %.1f TFLOP/s, device copy %.0f GB/s (2 GiB, read+write)" %
      (rate(8192), 10 * 2 * x.numel() * 4 / e[0].elapsed_time(e[1]) / 1e6), file=sys.stderr)
print("%.1f" % rate(4096))
PY
)
echo "torch bf16 4096^3: ${REF:-?} TFLOP/s"

[ -x "$T/vulkan_test_vk_mulmat" ] && step mulmat_bench 240 "$T/vulkan_test_vk_mulmat" --bench
step bench_ops 300 "$BIN/tensile" bench ops --backend vulkan --json ${REF:+--ref-tflops $REF}

# the tests, on the GPU
for t in vulkan_test_vk_ops vulkan_test_vk_faults vulkan_test_vk_concurrency vulkan_test_vk_mulmat; do
    [ -x "$T/$t" ] && step "$t" 300 env TSL_VULKAN_VALIDATE=0 TSL_REQUIRE_VULKAN=1 "$T/$t"
done
for t in "$T"/cpu_test_ops_* "$T/cpu_test_mulmat"; do
    [ -x "$t" ] && step "vk_$(basename "$t")" 300 env TSL_TEST_BACKEND=vulkan TSL_VULKAN_VALIDATE=0 TSL_REQUIRE_VULKAN=1 "$t"
done
# the same under the Khronos validation layer
if [ -n "$LAYER" ]; then
    for t in vulkan_test_vk_ops vulkan_test_vk_faults vulkan_test_vk_concurrency; do
        [ -x "$T/$t" ] && step "validate_$t" 300 env VK_LAYER_PATH="$LAYER/usr/share/vulkan/explicit_layer.d" \
            LD_LIBRARY_PATH="$LAYER/usr/lib/x86_64-linux-gnu" TSL_VULKAN_VALIDATE=1 TSL_REQUIRE_VULKAN=1 "$T/$t"
    done
fi
step drill 300 "$BIN/tensile" drill --backend vulkan

# models: the shapes of Llama-3-8B and Qwen2.5-0.5B, Q4_0, random weights
step gen_8b 300 "$BIN/tensile" gen-model --shape llama3-8b --type q4_0 -o /tmp/llama3-8b-q4_0.gguf
step gen_05b 120 "$BIN/tensile" gen-model --shape qwen2.5-0.5b --type q4_0 -o /tmp/qwen-0.5b-q4_0.gguf
step model_8b 300 "$BIN/tensile" bench model -m /tmp/llama3-8b-q4_0.gguf --backend vulkan
# the same with an NV checkpoint at every level (what they cost; the progress word names a loss without them)
step model_8b_cp1 300 env TSL_VULKAN_CHECKPOINTS=1 "$BIN/tensile" bench model -m /tmp/llama3-8b-q4_0.gguf \
    --backend vulkan
step model_8b_profile 120 env TSL_VULKAN_PROFILE=1 "$BIN/tensile" bench model -m /tmp/llama3-8b-q4_0.gguf \
    --backend vulkan --prompt 8 --gen 64
step model_05b 300 "$BIN/tensile" bench model -m /tmp/qwen-0.5b-q4_0.gguf --backend vulkan
step model_05b_cb1 120 env TSL_VULKAN_CB=1 "$BIN/tensile" bench model -m /tmp/qwen-0.5b-q4_0.gguf --backend vulkan
step model_05b_profile 120 env TSL_VULKAN_PROFILE=1 "$BIN/tensile" bench model -m /tmp/qwen-0.5b-q4_0.gguf \
    --backend vulkan --prompt 8 --gen 64
step model_05b_json 300 "$BIN/tensile" bench model -m /tmp/qwen-0.5b-q4_0.gguf --backend vulkan --json
step run_05b 120 "$BIN/tensile" run -m /tmp/qwen-0.5b-q4_0.gguf -p "Hello" -n 32 --seed 1 --backend vulkan
rm -f /tmp/llama3-8b-q4_0.gguf /tmp/qwen-0.5b-q4_0.gguf
echo "== gpu.sh: $fails failed steps"
exit $fails
