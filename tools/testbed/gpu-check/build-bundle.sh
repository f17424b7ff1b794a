#!/bin/bash
# Builds the GPU-machine bundle in .gpu/ at the repository's root from this
# Debian 12 machine: built binaries of build/ and build-asan/, the NFS
# cluster's daemons and tools, every non-glibc shared library they need,
# run.sh (the CUDA checks to run there), node-bench.sh with node-table.py
# (shardfs-bench on that machine's cores) and common.sh (what both use), and
# under .gpu/bench/ the tree shardfs-bench runs from (its package, the
# cluster script, shardfs-warm, and build/ wrappers of its C readers and the
# daemon). See tools/testbed/gpu-check/README.md.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
G=$ROOT/.gpu
mkdir -p "$G"
# (.gpu/ is in .gitignore: a device run carries it by name)
for f in run.sh common.sh node-bench.sh node-table.py; do cp -p "$HERE/$f" "$G/$f"; done
cp -p /etc/netconfig "$G/netconfig" # libtirpc (rpcbind, ganesha) needs it; Ubuntu images lack it
rm -rf "${G:?}/libexec" "${G:?}/lib" "$G/lib-asan" "$G/lib-compat" "$G/cuda" "$G/ganesha" "${G:?}/bin" "$G/fallback" "$G/bench"
mkdir -p "$G/libexec" "$G/lib" "$G/lib-asan" "$G/lib-compat" "$G/cuda" "$G/ganesha" "${G:?}/bin" "$G/fallback"

# name -> source
declare -A OURS=(
	[shardfs]=$ROOT/build/fs/shardfs
	[test_staging_cuda]=$ROOT/build/tests/unit/test_staging_cuda
	[test_staging_cuda_asan]=$ROOT/build-asan/tests/unit/test_staging_cuda
	[shardfs-stage-bench]=$ROOT/build/tools/shardfs-stage-bench
	[shardfs-rawread]=$ROOT/build/tools/shardfs-rawread
	[shardfs-smallread]=$ROOT/build/tools/shardfs-smallread
	[shardfs-fusefloor]=$ROOT/build/tools/shardfs-fusefloor
)
# An older daemon beside it, for an A/B in one device call (run.sh's
# SFS_GPU_DAEMONS="shardfs shardfs-old", node-bench.sh by default). It keeps
# the name shardfs in a folder of its own: shardfs-bench finds a daemon by
# its process name.
if [[ -n ${SFS_GPU_OLD_DAEMON:-} ]]; then OURS[old/shardfs]=$SFS_GPU_OLD_DAEMON; fi
# Always ours, first on PATH (LD_LIBRARY_PATH wrappers): not on the target.
ALWAYS=(ganesha.nfsd rpcbind rpcinfo fusermount3)
# Only used where the target lacks them (ld.so --library-path wrappers, so
# that what they exec does not inherit our LD_LIBRARY_PATH).
FALLBACK=(ip tc nsenter unshare setsid flock mountpoint)

for n in "${!OURS[@]}"; do
	if [[ $n == test_staging_cuda_asan && ! -e ${OURS[$n]} ]]; then
		echo "warning: ${OURS[$n]} not built (ninja -C build-asan): run.sh's ASan step will fail" >&2
		continue
	fi
	mkdir -p "$(dirname "$G/libexec/$n")"
	cp -p "${OURS[$n]}" "$G/libexec/$n"
done
for n in "${ALWAYS[@]}" "${FALLBACK[@]}"; do cp -pL "$(command -v "$n")" "$G/libexec/$n"; done
cp -pL /usr/lib/x86_64-linux-gnu/ganesha/*.so "$G/ganesha/"
cp -pL /usr/local/cuda/lib/libcudart.so.13 "$G/cuda/" 2>/dev/null ||
	cp -pL /usr/local/cuda/lib64/libcudart.so.13 "$G/cuda/"

# glibc's own libraries are never copied (the target's glibc is newer);
# libstdc++/libgcc_s go to lib-compat, used only where the target lacks them;
# the sanitizer runtimes to lib-asan (only the ASan test's path).
GLIBC_RE='^(libc|libm|libpthread|libdl|librt|libresolv|libutil|libanl|libmvec|libnss_[a-z]+|libBrokenLocale|ld-linux-x86-64)\.so'
for f in "$G"/libexec/* "$G"/libexec/*/* "$G"/ganesha/*.so; do
	[[ -f $f ]] || continue
	ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r soname path; do
	if [[ $soname =~ $GLIBC_RE ]]; then continue; fi
	case $soname in
	libstdc++.so.* | libgcc_s.so.*) cp -pL "$path" "$G/lib-compat/$soname" ;;
	libasan.so.* | libubsan.so.*) cp -pL "$path" "$G/lib-asan/$soname" ;;
	*) cp -pL "$path" "$G/lib/$soname" ;;
	esac
done

# wrap PATH TARGET UP: a wrapper at PATH (UP folders below .gpu/) that runs
# .gpu/libexec/TARGET with the bundle's libraries, exec'd in place (same pid;
# the process name is TARGET's file name).
wrap() {
	local dots=.. i
	for ((i = 1; i < $3; i++)); do dots+=/..; done
	mkdir -p "$(dirname "$1")"
	cat >"$1" <<W
#!/bin/bash
# bundle wrapper: runs .gpu/libexec/$2 with the bundle's libraries
G=\$(cd "\$(dirname "\$(readlink -f "\${BASH_SOURCE[0]}")")/$dots" && pwd)
export LD_LIBRARY_PATH=\$G/lib\${SFS_GPU_EXTRA_LIBS:+:\$SFS_GPU_EXTRA_LIBS}
exec "\$G/libexec/$2" "\$@"
W
	chmod 755 "$1"
}

# Wrappers.
for n in "${ALWAYS[@]}" shardfs; do wrap "$G/bin/$n" "$n" 1; done
if [[ -n ${SFS_GPU_OLD_DAEMON:-} ]]; then wrap "$G/bin/shardfs-old" old/shardfs 1; fi
# ganesha: plugins from the bundle, no libnfsidmap plugins (see the wrapper).
cat >"$G/bin/ganesha.nfsd" <<'W'
#!/bin/bash
# bundle wrapper: .gpu/libexec/ganesha.nfsd with the bundle's libraries and
# FSAL plugins: a copy of the -f config with NFS_CORE_PARAM Plugins_Dir set
# to the bundle's, and NFSV4 UseGetpwnam (the ID mapper then needs no
# libnfsidmap plugin directory, which the target lacks: ganesha exits without).
# (LD_LIBRARY_PATH is set only for the exec: grep and sed here are the
# target's own, which our older libraries might not satisfy.)
G=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
args=()
while (($#)); do
	if [[ $1 == -f && $# -ge 2 ]]; then
		conf=$2.bundle
		{
			grep -q '^NFS_CORE_PARAM *{' "$2" ||
				printf 'NFS_CORE_PARAM {\n\tPlugins_Dir = "%s";\n}\n' "$G/ganesha"
			grep -q '^NFSV4 *{' "$2" || printf 'NFSV4 {\n\tUseGetpwnam = true;\n}\n'
			sed -e "s|^NFS_CORE_PARAM *{|&\n\tPlugins_Dir = \"$G/ganesha\";|" \
				-e 's|^NFSV4 *{|&\n\tUseGetpwnam = true;|' "$2"
		} >"$conf"
		args+=(-f "$conf")
		shift 2
	else
		args+=("$1")
		shift
	fi
done
export LD_LIBRARY_PATH=$G/lib${SFS_GPU_EXTRA_LIBS:+:$SFS_GPU_EXTRA_LIBS}
exec "$G/libexec/ganesha.nfsd" "${args[@]}"
W
# rpcbind: without the _rpc user (not on the target) it exits at once;
# -s keeps it running as root.
cat >"$G/bin/rpcbind" <<'W'
#!/bin/bash
# bundle wrapper: .gpu/libexec/rpcbind with the bundle's libraries; adds -s
# (stay root) where there is no _rpc user to switch to.
G=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
stay_root=(-s)
if id -u _rpc >/dev/null 2>&1; then stay_root=(); fi
export LD_LIBRARY_PATH=$G/lib${SFS_GPU_EXTRA_LIBS:+:$SFS_GPU_EXTRA_LIBS}
exec "$G/libexec/rpcbind" "${stay_root[@]}" "$@"
W
for n in "${FALLBACK[@]}"; do
	cat >"$G/fallback/$n" <<W
#!/bin/bash
# bundle fallback: .gpu/libexec/$n through the dynamic loader, so that what it
# runs does not inherit the bundle's library path.
G=\$(cd "\$(dirname "\$(readlink -f "\${BASH_SOURCE[0]}")")/.." && pwd)
exec /lib64/ld-linux-x86-64.so.2 --library-path "\$G/lib" "\$G/libexec/$n" "\$@"
W
done
chmod 755 "$G"/bin/* "$G"/fallback/*

# The tree shardfs-bench runs from: its paths are relative to its root
# (tools/..., build/tools/NAME, build/fs/shardfs), so .gpu/bench/ is laid out
# as a source tree with wrappers where the build's programs would be.
B=$G/bench
mkdir -p "$B/tools/bench" "$B/tools/testbed" "$B/tools/cmd" "$B/tools/client/python/shardfs"
cp -p "$ROOT/tools/bench/shardfs-bench" "$B/tools/bench/"
cp -pr "$ROOT/tools/bench/shardfs_bench" "$B/tools/bench/"
find "$B" -name __pycache__ -prune -exec rm -rf {} +
cp -p "$ROOT/tools/testbed/shardfs-cluster" "$B/tools/testbed/"
cp -p "$ROOT/tools/cmd/shardfs-warm" "$B/tools/cmd/"
cp -p "$ROOT"/tools/client/python/shardfs/*.py "$B/tools/client/python/shardfs/"
wrap "$B/build/fs/shardfs" shardfs 3
for n in shardfs-rawread shardfs-smallread shardfs-fusefloor; do wrap "$B/build/tools/$n" "$n" 3; done

{
	echo "bundle made $(date -u '+%F %T') UTC on $(hostname) from $(git -C "$ROOT" rev-parse HEAD)$(git -C "$ROOT" diff --quiet HEAD -- || echo ' (tracked files modified: check that build/ matches)')"
	echo "sha256 of the copied binaries:"
	(cd "$G/libexec" && for n in "${!OURS[@]}"; do [[ ! -e $n ]] || sha256sum "$n"; done | sort -k 2)
} >"$G/BUILD-INFO"

# Check: every library of every bundled ELF resolves in the bundle or glibc.
bad=0
for f in "$G"/libexec/* "$G"/libexec/*/* "$G"/ganesha/*.so "$G"/lib/*.so* "$G"/lib-asan/*.so*; do
	[[ -f $f ]] || continue
	out=$(LD_LIBRARY_PATH=$G/lib:$G/lib-asan:$G/lib-compat ldd "$f" 2>&1) || true
	while read -r soname arrow path _; do
		[[ $arrow == "=>" ]] || continue
		if [[ $path == not ]]; then echo "MISSING: $f: $soname"; bad=1; continue; fi
		[[ $path == "$G"/* || $soname =~ $GLIBC_RE ]] && continue
		echo "OUTSIDE BUNDLE: $f: $soname => $path"; bad=1
	done <<<"$out"
done
((bad == 0)) && echo "ldd check: every library resolves inside .gpu or to glibc"
du -sh "$G"
