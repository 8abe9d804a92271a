#!/bin/sh
# SPDX-License-Identifier: MIT
# test_install.sh - `make install` lays out the core library, its header and
# pkg-config file, the launcher, the preload library and the man page, and a
# program built against the installed core with pkg-config runs.
set -eu
build=${SL_BUILD:-build}
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
make -s BUILD="$build" DESTDIR="$root" PREFIX=/usr/local install >/dev/null
for f in lib/libsluice-core.a lib/libsluice-core.so lib/libsluice-core.so.0 include/sluice_core.h \
	lib/pkgconfig/sluice-core.pc bin/sluice lib/sluice/libsluice.so share/man/man1/sluice.1; do
	[ -e "$root/usr/local/$f" ] || { echo "FAIL: $f not installed"; exit 1; }
done
cat > "$root/use.c" <<'C'
#include <sluice_core.h>
#include <stdio.h>
int main(void)
{
	struct sl_limiter l;
	struct sl_params p = { .kind = SL_KIND_TOKEN, .amount = 2, .period_ns = 1000000000, .burst = 2 };
	if (sl_limiter_init(&l, &p, 1) != SL_OK)
		return 1;
	int admitted = 0;
	for (int i = 0; i < 3; i++)
		admitted += sl_limiter_acquire(&l, 1, 1, 0).verdict == SL_ADMIT;
	struct sl_decision d = sl_limiter_acquire(&l, 1, 1, 0);
	printf("%d %llu\n", admitted, (unsigned long long)d.wait_ns);
	return 0;
}
C
# The .pc names the final prefix; point it into the staging root.
flags=$(PKG_CONFIG_PATH="$root/usr/local/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$root" \
	pkg-config --cflags --libs sluice-core)
cc -o "$root/use" "$root/use.c" $flags
out=$(LD_LIBRARY_PATH="$root/usr/local/lib" "$root/use")
# Burst 2 at 2/s: two admitted, the third refused with a 500 ms wait.
[ "$out" = "2 500000000" ] || { echo "FAIL: got '$out', want '2 500000000'"; exit 1; }
"$root/usr/local/bin/sluice" --check --send 1MiB/s >/dev/null
[ -f "$root/usr/local/share/bash-completion/completions/sluice" ] || { echo "FAIL: no bash completion"; exit 1; }
# Another PREFIX (and LIBDIR) after the install above: sluice-core.pc must
# name them, not the prefix it was first generated with.
make -s BUILD="$build" DESTDIR="$root/b" PREFIX=/opt/sl LIBDIR=/opt/sl/lib64 install >/dev/null
pc="$root/b/opt/sl/lib64/pkgconfig/sluice-core.pc"
grep -qx 'prefix=/opt/sl' "$pc" && grep -qx 'libdir=${prefix}/lib64' "$pc" ||
	{ echo "FAIL: sluice-core.pc after PREFIX=/opt/sl LIBDIR=/opt/sl/lib64:"; cat "$pc"; exit 1; }
[ -f "$root/b/opt/sl/lib64/libsluice-core.so.0" ] && [ -f "$root/b/opt/sl/lib/sluice/libsluice.so" ] ||
	{ echo "FAIL: LIBDIR layout"; exit 1; }
# Leave the build's .pc as the default prefix again for whoever runs next.
make -s BUILD="$build" "$build/sluice-core.pc" >/dev/null
echo "install: ok ($out)"
