#!/usr/bin/env bash
# Compile and link turbo-hipblaslt's ROCm build (TURBO_BLASLT_ROCM) against a real hipBLASLt, on a machine
# without ROCm or a GPU: Debian unstable's hipBLASLt / HIP packages are downloaded (not installed), unpacked
# into a scratch tree laid out like /opt/rocm, and the extension is built by the package's own toolchain
# discovery and compile command (the host C++ compiler with -D__HIP_PLATFORM_AMD__), with -Wall -Wextra.
# The module is not loaded: Debian unstable's libraries need a newer glibc than this machine's, and there is
# no AMD GPU to run it on. A script, not a test: it downloads Debian's ROCm packages (network, minutes), which CI
# does not. Run from the repository root:
#   bash tools/rocm_compile_check.sh            # DEBIAN_MIRROR: default, the system's apt mirror
set -euo pipefail
ROOT=$(pwd)
WORK=${WORK:-$(mktemp -d)}
MIRROR=${DEBIAN_MIRROR:-$(grep -h -m1 -oP '^URIs:\s*\K\S+' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)}
[ -n "$MIRROR" ] || { echo "set DEBIAN_MIRROR (no apt mirror found in /etc/apt/sources.list.d)" >&2; exit 2; }
PACKAGES="libhipblaslt-dev libhipblaslt1 libhipblas-common-dev libamdhip64-dev libamdhip64-6"
mkdir -p "$WORK"/apt/lists/partial "$WORK"/apt/cache/archives/partial "$WORK"/debs "$WORK"/tree "$WORK"/rocm
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $MIRROR sid main" > "$WORK/apt/sources.list"
APT=(-o "Dir::Etc::sourcelist=$WORK/apt/sources.list" -o Dir::Etc::sourceparts=- -o "Dir::State::Lists=$WORK/apt/lists"
     -o "Dir::Cache=$WORK/apt/cache" -o APT::Sandbox::User=root)
apt-get "${APT[@]}" update -qq
(cd "$WORK/debs" && apt-get "${APT[@]}" download $PACKAGES)
for deb in "$WORK"/debs/*.deb; do dpkg-deb -x "$deb" "$WORK/tree"; done
ln -sfn "$WORK/tree/usr/include" "$WORK/rocm/include"
ln -sfn "$WORK/tree/usr/lib/x86_64-linux-gnu" "$WORK/rocm/lib"
ls "$WORK"/debs
PYTHONPATH=$ROOT/packages/turbo-hipblaslt/src python3 - "$WORK" <<'EOF'
import os, re, subprocess, sys
from pathlib import Path
from turbo_hipblaslt import _toolchain as t
work = Path(sys.argv[1])
env = {"TURBO_HIPBLASLT_ROCM_HOME": str(work / "rocm"), "PATH": os.environ["PATH"]}
tc, why = t.find_toolchain(env, platform="rocm")
if tc is None:
    sys.exit(f"no toolchain: {why}")
version = (work / "rocm" / "include" / "hipblaslt" / "hipblaslt-version.h").read_text()
print("hipBLASLt", ".".join(re.findall(r"HIPBLASLT_VERSION_(?:MAJOR|MINOR|PATCH)\s+(\d+)", version)))
print("compiler:", subprocess.run([tc.compiler, "--version"], capture_output=True, text=True).stdout.splitlines()[0])
print("defines:", " ".join(tc.defines))
cmd = t.compile_command(tc, work / "_C.abi3.so")
cmd = [cmd[0], "-Wall", "-Wextra", *cmd[1:]]
proc = subprocess.run(cmd, capture_output=True, text=True)
ours = [line for line in proc.stderr.splitlines() if "turbo_blaslt" in line]
print("\n".join(ours) or "no diagnostic in turbo's sources")
print("exit status", proc.returncode, "(the library's own headers' warnings not shown)")
sys.exit(proc.returncode)
EOF
nm -D --undefined-only "$WORK/_C.abi3.so" | grep -c hipblaslt_ext | xargs echo "hipblaslt_ext symbols the module imports:"
