#!/bin/sh
# SPDX-License-Identifier: MIT
# mkdeb.sh BUILD_DIR VERSION - build BUILD_DIR/sluice_VERSION_ARCH.deb with
# dpkg-deb alone (no debian/ source tree, no debhelper), then check it with
# lintian if lintian is installed. Called by `make deb`.
#
# Layout: /usr/bin/sluice; /usr/lib/sluice/libsluice.so (private: the
# launcher looks for it in BINDIR/../lib/sluice/); the core library, its
# archive and sluice-core.pc in /usr/lib/MULTIARCH/ with sluice_core.h in
# /usr/include; the man page; the bash completion; copyright and changelog
# in /usr/share/doc/sluice. One package: the lintian warnings that follow
# from not splitting out libsluice-core0 and libsluice-core-dev are listed
# in README.md ("Debian package").
# DEB_MAINTAINER names the maintainer; the default is a placeholder at the
# reserved .invalid domain: set it to a real address to publish the package.
set -eu
maintainer=${DEB_MAINTAINER:-sluice authors <sluice@sluice.invalid>}
build=$1
version=$2
arch=$(dpkg --print-architecture)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
top=$(pwd)
work="$build/deb"
root="$work/root"
deb="$build/sluice_${version}_${arch}.deb"

# Debian's hardening flags; -ffile-prefix-map keeps the build path out.
hard_cflags="-g -O2 -ffile-prefix-map=$top=. -fstack-protector-strong -Wformat -Werror=format-security -D_FORTIFY_SOURCE=2"
hard_ldflags="-Wl,-z,relro -Wl,-z,now"

rm -rf "$work"
mkdir -p "$root/DEBIAN"
make -s BUILD="$work/build" PREFIX=/usr LIBDIR="/usr/lib/$multiarch" CFLAGS="$hard_cflags" \
	EXTRA_CFLAGS="$hard_ldflags" DESTDIR="$root" install >/dev/null

# Debian ships stripped objects (debug symbols would go to a -dbgsym
# package, which dpkg-deb alone does not make) and gzipped manuals.
strip --strip-unneeded --remove-section=.comment --remove-section=.note \
	"$root/usr/bin/sluice" "$root/usr/lib/sluice/libsluice.so" \
	"$root/usr/lib/$multiarch/libsluice-core.so.0"
strip --strip-debug --enable-deterministic-archives "$root/usr/lib/$multiarch/libsluice-core.a"
gzip -9n "$root/usr/share/man/man1/sluice.1"

doc="$root/usr/share/doc/sluice"
mkdir -p "$doc"
{
	echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
	echo "Upstream-Name: sluice"
	echo
	echo "Files: *"
	echo "Copyright: 2026 the sluice authors"
	echo "License: Expat"
	echo
	echo "License: Expat"
	sed -n '/^Permission/,$p' LICENSE | sed 's/^$/./; s/^/ /'
} > "$doc/copyright"
# A native package's changelog, dated from the last commit (reproducible).
date=$(git log -1 --format=%aD 2>/dev/null || date -R)
printf 'sluice (%s) unstable; urgency=medium\n\n  * Built from the sluice source tree (make deb).\n\n -- %s  %s\n' \
	"$version" "$maintainer" "$date" | gzip -9n > "$doc/changelog.gz"

# The core library is public: ldconfig must see it, and shlibs says which
# package provides it to packages that link it.
echo "activate-noawait ldconfig" > "$root/DEBIAN/triggers"
echo "libsluice-core 0 sluice (>= $version)" > "$root/DEBIAN/shlibs"

# The newest glibc symbol version the binaries use.
glibc=$(objdump -T "$root/usr/bin/sluice" "$root/usr/lib/sluice/libsluice.so" \
	"$root/usr/lib/$multiarch/libsluice-core.so.0" | grep -o 'GLIBC_[0-9.]*' |
	sed 's/GLIBC_//' | sort -uV | tail -n 1)
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<EOF
Package: sluice
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $size
Depends: libc6 (>= $glibc)
Suggests: libhiredis0.14
Section: net
Priority: optional
Description: throttle an unmodified program's network calls
 sluice runs a dynamically linked program with a preloaded library
 (libsluice.so) that delays or refuses its connect, accept, send and
 receive calls by rate limits: connection rate, concurrent connections,
 bandwidth or message rate, per process, host-wide or across machines.
 .
 This package has the sluice launcher (sluice stat, sluice set, and a
 Prometheus endpoint), the preload library, the lock-free limiter core
 (libsluice-core, its header and pkg-config file), the manual page and
 the bash completion. Rules with redis= (limits shared across machines)
 need libhiredis0.14, loaded only when such a rule is given.
EOF
(cd "$root" && find . -type f ! -path './DEBIAN/*' -printf '%P\0' | sort -z |
	xargs -0 md5sum) > "$work/md5sums"
mv "$work/md5sums" "$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/control" "$root/DEBIAN/md5sums" "$root/DEBIAN/triggers" "$root/DEBIAN/shlibs"
find "$root" -type d -exec chmod 0755 {} +

dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "deb: $deb"
if command -v lintian >/dev/null 2>&1; then
	# Errors fail the build; warnings are printed (README.md justifies each).
	rc=0
	lintian --fail-on error --tag-display-limit 0 "$deb" > "$build/sluice.lintian" 2>&1 || rc=$?
	grep -v 'root privileges' "$build/sluice.lintian" || true
	echo "deb: lintian: $(grep -c '^E:' "$build/sluice.lintian" || true) errors, $(grep -c '^W:' "$build/sluice.lintian" || true) warnings (in $build/sluice.lintian)"
	[ "$rc" -eq 0 ] || { echo "deb: lintian failed (exit $rc)" >&2; exit 1; }
else
	echo "deb: lintian not installed, not checked (apt-get install lintian)"
fi
