#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Packaging: build the .debs with packaging/build-deb, install them
# system-wide (dpkg -i), mount a real cluster through `mount -t fuse.shardfs`
# with the INSTALLED daemon and read it byte-exact; build the RPMs with
# packaging/build-rpm (rpmbuild --nodeps on Debian); every man page renders
# without warnings; deployment YAML parses and scripts pass bash -n; the
# Slurm prolog warms through the mount. The staging packages: a C program
# builds against the installed libshardfs through pkg-config and the
# installed python3-shardfs imports outside the tree; both query the mount.
# Leaves the work tree as it was. The packages it installed that the machine
# did not have before are purged at the end.
. "$(dirname "$0")/lib.sh"
sfs_require
for t in dpkg-buildpackage:dpkg-dev dh:debhelper dh_python3:dh-python; do
	command -v "${t%%:*}" >/dev/null || skip "${t%%:*} is not installed (package ${t#*:})"
done
PKG=$SRC_ROOT/packaging
OUT=$WORK/pkgs
VERSION=$(sed -n "s/^ *version *: *'\([^']*\)'.*/\1/p" "$SRC_ROOT/meson.build" | head -1)
# Every package build-deb makes, dependents first (the order of the purge).
PACKAGES="python3-shardfs libshardfs-dev libshardfs1 shardfs-tools shardfs"
# The ones this machine does not have yet: the only ones purged at the end.
NEW_PACKAGES=
for p in $PACKAGES; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
		NEW_PACKAGES="$NEW_PACKAGES $p"
done
INSTALLED=no
# A clean environment for what runs against the installed packages: no
# PYTHONPATH, PKG_CONFIG_PATH, CPATH, LIBRARY_PATH, LD_LIBRARY_PATH or
# pyenv/virtualenv on the PATH that could find the work tree's files or
# another python3 than Debian's, which python3-shardfs is for.
clean_env() { env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8 "$@"; }

purge_new_packages() {
	mountpoint -q "$MNT" 2>/dev/null && umount -l "$MNT"
	[ -z "$NEW_PACKAGES" ] || dpkg --purge $NEW_PACKAGES >"$WORK/purge.log" 2>&1
}
pkg_cleanup() {
	set +e
	[ "$INSTALLED" = yes ] && purge_new_packages
	sfs_cleanup
}
trap pkg_cleanup EXIT
mkdir -p "$WORK" "$OUT"

# What a package build could leave behind: new top-level entries (debian/,
# obj-*/, build-packages/) and anything under packaging/, ignored or not.
# (Not the whole status: others may edit the tree while this runs; nor the
# test command's own build folders, which its sanitizer rounds make while
# this suite runs.)
tree_state() {
	ls -a "$SRC_ROOT" | grep -vxE 'build|build-asan|build-tsan'
	git -C "$SRC_ROOT" status --porcelain --ignored --untracked-files=all -- packaging 2>/dev/null
}
tree_before=$(tree_state)

# --- Debian packages -------------------------------------------------------
t0=$(date +%s)
if "$PKG/build-deb" -o "$OUT" --nocheck >"$WORK/deb.list" 2>"$WORK/deb.log"; then
	ok "build-deb: dpkg-buildpackage -us -uc -b built $(grep -c '\.deb$' "$WORK/deb.list") packages in $(( $(date +%s) - t0 )) s"
else
	tail -30 "$WORK/deb.log" | sed 's/^/# /'
	not_ok "build-deb failed"
	sfs_finish
fi
ARCH=$(dpkg --print-architecture)
MULTIARCH=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
DEB=$OUT/shardfs_${VERSION}_$ARCH.deb
DEB_TOOLS=$OUT/shardfs-tools_${VERSION}_$ARCH.deb
DEB_LIB=$OUT/libshardfs1_${VERSION}_$ARCH.deb
DEB_DEV=$OUT/libshardfs-dev_${VERSION}_$ARCH.deb
DEB_PY=$OUT/python3-shardfs_${VERSION}_all.deb
DEBS=("$DEB" "$DEB_TOOLS" "$DEB_LIB" "$DEB_DEV" "$DEB_PY")
check "shardfs and shardfs-tools .debs exist" [ -f "$DEB" -a -f "$DEB_TOOLS" ]
check "libshardfs1, libshardfs-dev and python3-shardfs (all) .debs exist" \
	[ -f "$DEB_LIB" -a -f "$DEB_DEV" -a -f "$DEB_PY" ]
for d in "${DEBS[@]}"; do
	dpkg-deb -c "$d" 2>/dev/null | awk '{print $6}' >>"$WORK/deb.files"
done
for f in ./usr/sbin/shardfs ./usr/bin/shardfs-stat ./usr/bin/shardfs-warm \
	./usr/share/man/man8/shardfs.8.gz ./usr/share/man/man7/shardfs-stats.7.gz \
	./usr/share/man/man1/shardfs-stat.1.gz \
	./usr/share/man/man1/shardfs-warm.1.gz \
	./usr/bin/shardfs-cache ./usr/share/man/man1/shardfs-cache.1.gz \
	./usr/share/man/man1/shardfs-bench.1.gz ./usr/bin/shardfs-bench \
	./usr/lib/shardfs/shardfs-bench ./usr/lib/shardfs/shardfs-cluster \
	./usr/lib/shardfs/shardfs_bench/cli.py ./usr/lib/shardfs/shardfs_bench/modes/striping.py \
	./usr/lib/shardfs/shardfs-gendata ./usr/lib/shardfs/shardfs-rawread \
	./usr/lib/shardfs/shardfs-smallread \
	./usr/share/doc/shardfs/examples/systemd/mnt-dataset.mount \
	./usr/share/doc/shardfs/examples/deploy/slurm/prolog.sh \
	./usr/share/doc/shardfs/examples/deploy/slurm/epilog.sh \
	./usr/lib/$MULTIARCH/libshardfs.so.1 ./usr/lib/$MULTIARCH/libshardfs.so.1.0.0 \
	./usr/include/shardfs/shardfs.h ./usr/include/shardfs/shardfs_ioctl.h \
	./usr/lib/$MULTIARCH/libshardfs.so ./usr/lib/$MULTIARCH/libshardfs.a \
	./usr/lib/$MULTIARCH/pkgconfig/shardfs.pc \
	./usr/share/doc/libshardfs-dev/examples/stage_shm.c \
	./usr/lib/python3/dist-packages/shardfs/__init__.py \
	./usr/share/doc/python3-shardfs/examples/stage_tfrecord.py; do
	check "package ships ${f#.}" grep -qxF "$f" "$WORK/deb.files"
done
# pkg_has DEB PATTERN: a file of DEB matches the extended regexp PATTERN.
pkg_has() { dpkg-deb -c "$1" | awk '{print $6}' | grep -qE "$2"; }
check "libshardfs1 holds the runtime library only" \
	bash -c "[ \"\$(dpkg-deb -c '$DEB_LIB' | awk '{print \$6}' | grep -E '\\.(so|a|h|pc)\$')\" = '' ]"
check "libshardfs-dev Depends on libshardfs1 (= $VERSION)" \
	bash -c "dpkg-deb -f '$DEB_DEV' Depends | grep -qE '(^|, )libshardfs1 \\(= $VERSION\\)(,|\$)'"
check "shardfs Depends on python3-shardfs (= $VERSION) (shardfs-warm imports it)" \
	bash -c "dpkg-deb -f '$DEB' Depends | grep -qE '(^|, )python3-shardfs \\(= $VERSION\\)(,|\$)'"
check "python3-shardfs is Architecture all and Depends on python3" \
	bash -c "[ \"\$(dpkg-deb -f '$DEB_PY' Architecture)\" = all ] && dpkg-deb -f '$DEB_PY' Depends | grep -qE '(^|, )python3(:any)?( |,|\$)'"
check "no package ships the stage_shm binary or a __pycache__" \
	bash -c "! grep -qE '/stage_shm\$|/__pycache__/' '$WORK/deb.files'"
check "the daemon packages leave the staging files to the new ones" \
	bash -c "! dpkg-deb -c '$DEB' | grep -qE 'libshardfs|include/shardfs|dist-packages|stage_'"
check "shardfs Depends on fuse3 (mount.fuse3)" \
	bash -c "dpkg-deb -f '$DEB' Depends | grep -qE '(^|, )fuse3(,|$| )'"
# lintian (installed by tools/testbed/install-deps): no error and no warning on any
# of the packages (informational tags are left alone).
if command -v lintian >/dev/null; then
	lintian --tag-display-limit 0 "${DEBS[@]}" >"$WORK/lintian.log" 2>&1
else
	echo "E: lintian is not installed (tools/testbed/install-deps installs it)" >"$WORK/lintian.log"
fi
n_tags=$(grep -cE '^[EW]: ' "$WORK/lintian.log" || true)
check "lintian: no error or warning on the .debs ($n_tags)" \
	bash -c "! grep -E '^[EW]: ' '$WORK/lintian.log' | sed 's/^/# /' | grep ."
check "build-deb left nothing in the work tree" [ "$(tree_state)" = "$tree_before" ]

export DEBIAN_FRONTEND=noninteractive
if dpkg -i "${DEBS[@]}" >"$WORK/dpkg.log" 2>&1 ||
	{ apt-get install -f -y -qq >>"$WORK/dpkg.log" 2>&1 && dpkg -i "${DEBS[@]}" >>"$WORK/dpkg.log" 2>&1; }; then
	INSTALLED=yes
	ok "dpkg -i installed shardfs, shardfs-tools, libshardfs1, libshardfs-dev, python3-shardfs"
else
	sed 's/^/# /' "$WORK/dpkg.log" | tail -20
	not_ok "dpkg -i failed"
fi
check "shardfs is on root's PATH at /usr/sbin/shardfs" [ "$(command -v shardfs)" = /usr/sbin/shardfs ]
check "installed shardfs --version is $VERSION" bash -c "shardfs --version | grep -qx 'shardfs $VERSION'"
check "installed shardfs-stat runs (--help)" bash -c "shardfs-stat --help | grep -q usage"
check "installed shardfs-cache runs (--help)" bash -c "shardfs-cache --help | grep -q '^usage: shardfs-cache'"
check "installed shardfs-bench wrapper runs (--help)" bash -c "shardfs-bench --help | grep -q -- --rawread"
check "installed python tools use /usr/bin/python3" \
	bash -c "head -1 /usr/bin/shardfs-stat /usr/lib/shardfs/shardfs-bench | grep -c '^#!/usr/bin/python3$' | grep -qx 2"
check "man finds the installed shardfs(8)" bash -c "man -w 8 shardfs | grep -q /usr/share/man/man8/shardfs.8"

# --- the staging packages, installed: C through pkg-config, Python -------------
check "installed /usr/include/shardfs/shardfs_ioctl.h and shardfs.h" \
	[ -f /usr/include/shardfs/shardfs_ioctl.h -a -f /usr/include/shardfs/shardfs.h ]
if clean_env pkg-config --cflags --libs shardfs >"$WORK/pc.out" 2>&1; then
	ok "pkg-config --cflags --libs shardfs: $(cat "$WORK/pc.out")"
else
	not_ok "pkg-config --cflags --libs shardfs failed: $(head -3 "$WORK/pc.out")"
fi
check "pkg-config names -lshardfs, the installed .pc, version $VERSION" bash -c "
	grep -qw -- -lshardfs '$WORK/pc.out' &&
	[ \"\$(pkg-config --path shardfs)\" = /usr/lib/$MULTIARCH/pkgconfig/shardfs.pc ] &&
	[ \"\$(pkg-config --modversion shardfs)\" = '$VERSION' ]"
mkdir -p "$WORK/cprog"
cat >"$WORK/cprog/q.c" <<'C'
/* shardfs_query() on argv[1]: prints "<SHARDFS_ABI_VERSION> <ret> <abi_version> <caps>". */
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
#include <shardfs/shardfs.h>

int main(int argc, char **argv)
{
	struct shardfs_query q = { 0 };
	int fd = open(argc > 1 ? argv[1] : "/", O_RDONLY);
	if (fd < 0) {
		perror("open");
		return 2;
	}
	int r = shardfs_query(fd, &q);
	printf("%d %d %u %u\n", SHARDFS_ABI_VERSION, r, q.abi_version, q.caps);
	close(fd);
	return 0;
}
C
if clean_env bash -c "cd '$WORK/cprog' && cc -Wall -Werror -o q q.c \$(pkg-config --cflags --libs shardfs)" \
	>"$WORK/cc.log" 2>&1; then
	ok "a C program using shardfs_query() compiles and links: cc q.c \$(pkg-config --cflags --libs shardfs)"
else
	sed 's/^/# /' "$WORK/cc.log" | head -20
	not_ok "cc q.c \$(pkg-config --cflags --libs shardfs) failed"
fi
check "it loads the installed /usr/lib/$MULTIARCH/libshardfs.so.1" clean_env bash -c \
	"ldd '$WORK/cprog/q' | grep -qE 'libshardfs\\.so\\.1 => /(usr/)?lib/$MULTIARCH/libshardfs\\.so\\.1 '"
# Off shardfs the query fails (-ENOTTY from most filesystems; any -errno
# will do) and leaves the struct alone.
q_out=$(clean_env "$WORK/cprog/q" "$WORK/cprog/q.c" 2>&1)
check "... and runs: shardfs_query() of a file off shardfs fails ($q_out)" \
	bash -c "read -r hdr ret abi caps <<<'$q_out' && [ \"\$hdr\" = 1 ] && (( ret < 0 )) && [ \"\$abi\" = 0 ]"
check "the static libshardfs.a links too" clean_env bash -c "cd '$WORK/cprog' &&
	cc -Wall -Werror -o q-static q.c \$(pkg-config --cflags shardfs) \$(pkg-config --variable=libdir shardfs)/libshardfs.a &&
	! ldd q-static | grep -q libshardfs && [ \"\$(./q-static q.c)\" = '$q_out' ]"
# The module, with Debian's python3 (what the package is for), PYTHONPATH
# unset, from a directory outside the tree.
if (cd / && clean_env python3 -c 'import shardfs; print(shardfs.ABI_VERSION); print(shardfs.__file__)') \
	>"$WORK/py.out" 2>&1; then
	ok "python3 -c 'import shardfs; print(shardfs.ABI_VERSION)' (from /, PYTHONPATH unset): $(head -1 "$WORK/py.out")"
else
	sed 's/^/# /' "$WORK/py.out" | tail -5
	not_ok "python3 -c 'import shardfs' with the installed module failed"
fi
check "... it is the installed module, with the header's ABI version" \
	bash -c "[ \"\$(sed -n 2p '$WORK/py.out')\" = /usr/lib/python3/dist-packages/shardfs/__init__.py ] &&
		[ \"\$(sed -n 1p '$WORK/py.out')\" = \"\$(sed -n 's/^#define SHARDFS_ABI_VERSION \\([0-9]*\\).*/\\1/p' /usr/include/shardfs/shardfs_ioctl.h)\" ]"

# --- the installed daemon, through mount(8) -> mount.fuse3 -> shardfs --------
mkdir -p "$EXPORT"
"$GENDATA" "$EXPORT" --shards 3 --shard-mib 8 --small 50 --classes 5 --small-kib 20 --seed 5 -q
chmod -R a+rX "$EXPORT"
sfs_cluster_up 3
if in_ns mount -t fuse.shardfs "$ADDRS:/ifs" "$MNT" -o nconnect=2,timeo=20,allow_other,_netdev,nofail \
	2>"$WORK/mount.err"; then
	ok "mount -t fuse.shardfs $ADDRS:/ifs"
else
	not_ok "mount -t fuse.shardfs failed: $(head -3 "$WORK/mount.err")"
fi
check "mounted as fuse.shardfs" bash -c "findmnt -n -o FSTYPE '$MNT' | grep -qx fuse.shardfs"
pid=$(pgrep -f "shardfs .* $MNT( |\$)" | head -1)
check "the daemon is the installed binary" [ -n "$pid" -a "$(readlink "/proc/${pid:-0}/exe")" = /usr/sbin/shardfs ]
drop_caches
for f in "$EXPORT"/shards/train-*.tfrecord; do
	check "read ${f#$EXPORT/} byte-exact" same_bytes "$MNT/${f#$EXPORT/}" "$f"
done
check "small files byte-exact" bash -c "cd '$EXPORT' && find images -type f | head -20 | while read -r f; do cmp -s \"\$f\" '$MNT'/\"\$f\" || exit 1; done"
check "installed shardfs-stat reports every node" \
	bash -c "out=\$(shardfs-stat '$MNT') && for a in ${ADDRS//,/ }; do grep -q \"^\$a \" <<<\"\$out\" || exit 1; done"
# The installed library and module against the installed daemon.
shard0=$(ls "$MNT"/shards/train-*.tfrecord 2>/dev/null | head -1)
q_out=$(clean_env "$WORK/cprog/q" "${shard0:-$MNT/none}" 2>&1)
check "C program: shardfs_query() of a file on the mount returns 0, ABI 1, CAP_SHM ($q_out)" \
	bash -c "read -r hdr ret abi caps <<<'$q_out' && [ \"\$ret\" = 0 ] && [ \"\$abi\" = \"\$hdr\" ] && (( caps & 1 ))"
check "python3: shardfs.query() of a file on the mount (installed module)" \
	bash -c "cd / && env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin python3 -c '
import sys, shardfs
assert shardfs.__file__ == \"/usr/lib/python3/dist-packages/shardfs/__init__.py\", shardfs.__file__
with open(sys.argv[1], \"rb\") as f:
    q = shardfs.query(f)
assert q.abi_version == shardfs.ABI_VERSION and q.caps & shardfs.CAP_SHM, q
' '${shard0:-$MNT/none}'"

# The Slurm prolog: warms what the job's comment names, as the job's user,
# only on shardfs mounts, and exits 0 whatever happens. First the fallback
# (cat, what runs without shardfs-warm), then with shardfs-warm, which on
# this cacheless mount may fail: that is logged, and the prolog exits 0.
read_bytes() { stat_value shardfs_fuse_read_bytes_total; }
prolog() {
	env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin SLURM_JOB_ID=42 "$@" bash "$PKG/deploy/slurm/prolog.sh" \
		>>"$WORK/prolog.log" 2>&1
}
echo "SHARDFS_WARM_TOOL=no-such-tool" >"$WORK/prolog-fallback"
drop_caches
b0=$(read_bytes)
check "prolog (fallback) exits 0 for a directory on the mount, as user nobody" \
	prolog SHARDFS_PROLOG_DEFAULTS="$WORK/prolog-fallback" SLURM_JOB_COMMENT="shardfs-warm=$MNT/shards" \
	SLURM_JOB_UID=65534 SLURM_JOB_GID=65534
b1=$(read_bytes)
check "prolog (fallback) read the job's shards through the mount ($(( b1 - b0 )) bytes)" \
	[ $(( b1 - b0 )) -ge $(( 3 * 8 << 20 )) ]
check "prolog with shardfs-warm exits 0" prolog SLURM_JOB_COMMENT="x shardfs-warm=$MNT/shards:$MNT/images y"
b0=$(read_bytes)
check "prolog exits 0 for a path off shardfs" \
	prolog SHARDFS_PROLOG_DEFAULTS="$WORK/prolog-fallback" SLURM_JOB_COMMENT="shardfs-warm=$EXPORT/shards"
check "prolog exits 0 without a comment" prolog
check "... and read nothing through the mount" [ "$(read_bytes)" = "$b0" ]
check "unmount ends the installed daemon" sfs_umount

# --- RPM ----------------------------------------------------------------------
if command -v rpmbuild >/dev/null; then
	t0=$(date +%s)
	if "$PKG/build-rpm" -o "$OUT" --nocheck >"$WORK/rpm.list" 2>"$WORK/rpm.log"; then
		ok "build-rpm: rpmbuild -bb built $(grep -c '\.rpm$' "$WORK/rpm.list") packages in $(( $(date +%s) - t0 )) s"
	else
		tail -30 "$WORK/rpm.log" | sed 's/^/# /'
		not_ok "build-rpm failed"
	fi
	RPM=$(grep "/shardfs-$VERSION-[^/]*\.rpm$" "$WORK/rpm.list" | head -1)
	RPM_TOOLS=$(grep "/shardfs-tools-$VERSION-[^/]*\.rpm$" "$WORK/rpm.list" | head -1)
	check "shardfs rpm ships the daemon, shardfs-stat and shardfs(8)" \
		bash -c "rpm -qpl '$RPM' >'$WORK/rpm.files' && grep -qx /usr/sbin/shardfs '$WORK/rpm.files' && grep -qx /usr/bin/shardfs-stat '$WORK/rpm.files' && grep -qx /usr/bin/shardfs-cache '$WORK/rpm.files' && grep -q '^/usr/share/man/man8/shardfs.8' '$WORK/rpm.files'"
	check "shardfs rpm Requires fuse3" bash -c "rpm -qp --requires '$RPM' | grep -qx fuse3"
	check "shardfs rpm Requires python3-shardfs of its version (shardfs-warm imports it)" \
		bash -c "rpm -qp --requires '$RPM' | grep -qE '^python3-shardfs = $VERSION-'"
	check "shardfs-tools rpm ships the bench and the cluster" \
		bash -c "rpm -qpl '$RPM_TOOLS' | grep -q '/shardfs-cluster\$' && rpm -qpl '$RPM_TOOLS' | grep -qx /usr/bin/shardfs-bench"
	RPM_LIB=$(grep "/libshardfs-$VERSION-[^/]*\.rpm$" "$WORK/rpm.list" | head -1)
	RPM_DEVEL=$(grep "/libshardfs-devel-$VERSION-[^/]*\.rpm$" "$WORK/rpm.list" | head -1)
	RPM_PY=$(grep "/python3-shardfs-$VERSION-[^/]*\.noarch\.rpm$" "$WORK/rpm.list" | head -1)
	check "libshardfs rpm ships libshardfs.so.1 and no .so/.h/.pc/.a" \
		bash -c "rpm -qpl '$RPM_LIB' >'$WORK/rpm-lib.files' && grep -qE '^/usr/lib(64)?/libshardfs\\.so\\.1\$' '$WORK/rpm-lib.files' &&
			! grep -qE '\\.(so|h|pc|a)\$' '$WORK/rpm-lib.files'"
	check "libshardfs-devel rpm ships the headers, .so, .a, shardfs.pc; Requires libshardfs of its version" \
		bash -c "rpm -qpl '$RPM_DEVEL' >'$WORK/rpm-devel.files' &&
			for f in /usr/include/shardfs/shardfs.h /usr/include/shardfs/shardfs_ioctl.h 'lib(64)?/libshardfs\\.so' \\
				'lib(64)?/libshardfs\\.a' 'lib(64)?/pkgconfig/shardfs\\.pc' '/examples/stage_shm\\.c'; do
				grep -qE \"\$f\\\$\" '$WORK/rpm-devel.files' || exit 1
			done && rpm -qp --requires '$RPM_DEVEL' | grep -qE '^libshardfs(\\(.*\\))? = $VERSION-'"
	check "python3-shardfs rpm (noarch) ships the module" \
		bash -c "rpm -qpl '$RPM_PY' | grep -qE '^/usr/lib/python3[.0-9]*/site-packages/shardfs/__init__\\.py\$'"
	check "build-rpm left nothing in the work tree" [ "$(tree_state)" = "$tree_before" ]
else
	not_ok "rpmbuild is missing (package rpm)"
fi

# --- man pages ----------------------------------------------------------------
if command -v man >/dev/null; then
	for m in "$PKG"/man/*.[1-8]; do
		check "man --warnings: $(basename "$m") renders without warnings" \
			bash -c "MANWIDTH=80 man --warnings -l '$m' 2>'$WORK/man.err' >/dev/null && [ ! -s '$WORK/man.err' ] || { sed 's/^/# /' '$WORK/man.err'; false; }"
		check "$(basename "$m") is in the Debian and RPM packages" \
			bash -c "grep -qxF 'packaging/man/$(basename "$m")' '$PKG'/debian/*.manpages && grep -q 'packaging/man/\*' '$PKG/rpm/shardfs.spec'"
	done
else
	not_ok "man is missing (package man-db)"
fi
missing=
for o in $(/usr/sbin/shardfs --help | sed -n 's/^  \([a-z_]*\)[= ].*/\1/p'); do
	grep -qE "^\.B[IR]? $o([= ]|\$)" "$PKG/man/shardfs.8" || missing="$missing $o"
done
check "shardfs(8) documents every mount option of shardfs --help${missing:+ (missing:$missing)}" [ -z "$missing" ]
# man_has_options PAGE COMMAND...: every long option of COMMAND --help is in PAGE.
man_has_options() {
	local page=$1 o missing=
	shift
	for o in $("$@" --help | grep -oE -- '--[a-z][a-z-]*' | sort -u); do
		grep -qF -- "$(sed 's/-/\\-/g' <<<"$o")" "$page" || missing="$missing $o"
	done
	[ -z "$missing" ] || { diag "$(basename "$page") lacks:$missing"; return 1; }
}
check "shardfs-stat(1) documents every option of shardfs-stat --help" \
	man_has_options "$PKG/man/shardfs-stat.1" "$SRC_ROOT/tools/cmd/shardfs-stat"
check "shardfs-bench(1) documents every option of shardfs-bench --help" \
	man_has_options "$PKG/man/shardfs-bench.1" python3 "$SRC_ROOT/tools/bench/shardfs-bench"
check "shardfs-warm(1) documents every option of shardfs-warm --help" \
	man_has_options "$PKG/man/shardfs-warm.1" "$SRC_ROOT/tools/cmd/shardfs-warm"
check "shardfs-cache(1) documents every option of shardfs-cache --help" \
	man_has_options "$PKG/man/shardfs-cache.1" "${SFS_CACHE_TOOL:-/usr/bin/shardfs-cache}"

# --- deployment examples and scripts ---------------------------------------------
if python3 -c 'import yaml' 2>/dev/null; then
	for y in "$PKG"/deploy/kubernetes/*.yaml; do
		check "YAML parses: ${y#$PKG/}" python3 -c 'import sys, yaml; docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]; assert docs and all("kind" in d and "apiVersion" in d for d in docs)' "$y"
	done
	check "DaemonSet: privileged, /dev/fuse, cache dir, Bidirectional /mnt, shardfs -f, preStop umount" \
		python3 - "$PKG/deploy/kubernetes/shardfs-daemonset.yaml" <<'PY'
import sys, yaml
ds = next(d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "DaemonSet")
spec = ds["spec"]["template"]["spec"]
c = next(c for c in spec["containers"] if c["name"] == "shardfs")
vols = {v["name"]: v for v in spec["volumes"]}
mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
assert c["securityContext"]["privileged"] is True
assert vols[mounts["/dev/fuse"]["name"]]["hostPath"]["path"] == "/dev/fuse"
assert vols[mounts["/var/cache/shardfs"]["name"]]["hostPath"]["path"] == "/var/cache/shardfs"
assert mounts["/mnt"]["mountPropagation"] == "Bidirectional"
assert "shardfs -f" in " ".join(c["command"])
assert "umount" in " ".join(c["lifecycle"]["preStop"]["exec"]["command"])
side = [x for x in spec["containers"] if x is not c]
assert any("mv -f" in " ".join(x["command"]) and ".prom" in " ".join(x["command"]) for x in side)
PY
	check "training pod: /mnt/dataset hostPath with HostToContainer" \
		python3 - "$PKG/deploy/kubernetes/training-pod.yaml" <<'PY'
import sys, yaml
pod = next(d for d in yaml.safe_load_all(open(sys.argv[1])) if d)
vol = next(v for v in pod["spec"]["volumes"] if v.get("hostPath", {}).get("path") == "/mnt/dataset")
m = next(m for c in pod["spec"]["containers"] for m in c["volumeMounts"] if m["name"] == vol["name"])
assert m["mountPropagation"] == "HostToContainer"
PY
else
	not_ok "python3-yaml is missing (package python3-yaml)"
fi
for s in "$PKG/build-deb" "$PKG/build-rpm" "$PKG/deploy/slurm/prolog.sh" "$PKG/deploy/slurm/epilog.sh" "$PKG/debian/rules"; do
	case $s in
	*/rules) check "make -n parses ${s#$PKG/}" bash -c "cd '$WORK' && make -n -f '$s' -p >/dev/null 2>&1 </dev/null; [ \$? -ne 2 ]" ;;
	*) check "bash -n ${s#$PKG/}" bash -n "$s" ;;
	esac
done
check "sh -n shardfs-bench.in" sh -n "$PKG/shardfs-bench.in"
if command -v systemd-analyze >/dev/null; then
	mkdir -p "$WORK/units"
	cp "$PKG"/systemd/*.mount "$PKG"/systemd/*.automount "$PKG"/systemd/*.service "$PKG"/systemd/*.timer "$WORK/units/"
	cp "$WORK/units/shardfs-textfile@.timer" "$WORK/units/shardfs-textfile@mnt-dataset.timer"
	check "systemd-analyze verify accepts the unit examples" bash -c "
		cd '$WORK/units' && systemd-analyze verify --man=no ./mnt-dataset.mount ./mnt-dataset.automount \
			./shardfs-dataset.service ./shardfs-textfile@mnt-dataset.timer >'$WORK/verify.log' 2>&1
		rc=\$?; grep -v 'is not executable' '$WORK/verify.log' | grep -q . && { sed 's/^/# /' '$WORK/verify.log'; exit 1; }
		exit \$rc"
else
	diag "systemd-analyze not installed: unit files not verified"
fi

# --- purge --------------------------------------------------------------------
# What this test installed goes again (the EXIT trap does the same when the
# test stops early); packages the machine had before stay.
if [ "$INSTALLED" = yes ]; then
	INSTALLED=purged
	if [ -z "$NEW_PACKAGES" ]; then
		diag "all packages were installed before the test: none purged"
	elif purge_new_packages; then
		ok "dpkg --purge$NEW_PACKAGES"
	else
		sed 's/^/# /' "$WORK/purge.log" | tail -10
		not_ok "dpkg --purge$NEW_PACKAGES failed"
	fi
	left=
	for p in $NEW_PACKAGES; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "not-installed" ||
			! dpkg-query -W "$p" >/dev/null 2>&1 || left="$left $p"
	done
	check "no purged package is left in dpkg's database${left:+ (left:$left)}" [ -z "$left" ]
	# py3clean (python3-shardfs's prerm) must take the __pycache__ with it.
	for pf in python3-shardfs:/usr/lib/python3/dist-packages/shardfs \
		libshardfs-dev:/usr/include/shardfs libshardfs-dev:/usr/lib/$MULTIARCH/pkgconfig/shardfs.pc \
		libshardfs1:/usr/lib/$MULTIARCH/libshardfs.so.1 shardfs:/usr/sbin/shardfs; do
		case " $NEW_PACKAGES " in
		*" ${pf%%:*} "*) check "purge of ${pf%%:*} removed ${pf#*:}" [ ! -e "${pf#*:}" ] ;;
		esac
	done
fi
sfs_finish
