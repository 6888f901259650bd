#!/bin/sh
# Build the libFuzzer harnesses of tests/fuzz/ with clang, ASan and UBSan,
# into build-fuzz/ at the repository root (or $FUZZ_BUILD_DIR).
#
#   tests/fuzz/build.sh            build all harnesses
#   tests/fuzz/build.sh --check    exit 77 if clang's fuzzer runtime is missing
#
# Each harness is compiled together with exactly the sources it exercises
# (listed below), so nothing else of shardfs needs to build with clang.
# Needs: clang and its libFuzzer runtime (Debian 12: clang libclang-rt-14-dev).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${FUZZ_BUILD_DIR:-$root/build-fuzz}
CC=${CC_FUZZ:-clang}
# The project's own flags (meson.build), then the sanitizers.
CFLAGS="-g -O1 -std=gnu11 -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -Wall -Wextra -Wpedantic -Werror
	-Wshadow -Wmissing-prototypes -Wstrict-prototypes -Wformat=2 -Wno-unused-parameter -fno-omit-frame-pointer
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined"

# Is there a compiler with the fuzzer runtime?
have_fuzzer() {
	command -v "$CC" >/dev/null 2>&1 || return 1
	tmp=$(mktemp -d)
	printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n)\n{ (void)d; (void)n; return 0; }\n' >"$tmp/t.c"
	# shellcheck disable=SC2086
	"$CC" $CFLAGS -Wno-missing-prototypes "$tmp/t.c" -o "$tmp/t" >/dev/null 2>&1
	rc=$?
	rm -rf "$tmp"
	return $rc
}

if ! have_fuzzer; then
	echo "fuzz: $CC with -fsanitize=fuzzer does not work (install clang libclang-rt-14-dev)" >&2
	exit 77
fi
[ "${1:-}" = "--check" ] && exit 0

mkdir -p "$out"
S="$root/shardidx"
D="$root/disk"
B="$root/backend"
F="$root/fs/tools"
shardidx_src="$S/shardidx_build.c $S/shardidx_field.c $S/shardidx_pax.c $S/shardidx_sparse.c $S/shardidx_tree.c $S/shardidx_index.c $S/shardidx_save.c $S/shardidx_compact.c"

build() {
	name=$1
	shift
	echo "fuzz: building $name"
	# shellcheck disable=SC2086
	$CC $CFLAGS -I"$root/tests/lib" "$@" -o "$out/$name"
}

build fuzz_tar -I"$S" -I"$D" "$here/fuzz_tar.c" $shardidx_src
build fuzz_index -I"$S" -I"$D" "$here/fuzz_index.c" $shardidx_src
build fuzz_xml -I"$B" -I"$D" "$here/fuzz_xml.c" "$B/backend_xml.c"
build fuzz_listing -I"$B" -I"$D" "$here/fuzz_listing.c" "$B/backend_listing.c" \
	"$B/backend_brace.c" "$B/backend_url.c" "$D/disk_json.c" -lcurl
build fuzz_pack -I"$F" "$here/fuzz_pack.c" "$F/fs_pack_plan.c"
C="$root/fs/core"
# fs_if_blob.c is included by its harness; the headers it needs are declarations only
build fuzz_ifview -I"$C" -I"$C/include" -I"$S" -I"$D" -I"$root/cachetier" -I"$root/backend" \
	-I"$root/fetch" "$here/fuzz_ifview.c"
