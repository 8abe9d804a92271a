# SPDX-License-Identifier: MIT
# sluice - one non-recursive GNU Makefile. Sources are found by wildcard, so a
# new file in core/, policy/, shim/, supervise/, cli/, tests/ or bench/ needs
# no edit here. `make` needs only a C compiler and libc; the targets that need
# more say so.
#
#   make, make all       libsluice.so, libsluice-core.{a,so}, the launcher, sluice-core.pc
#   make check           build and run the unit tests and check-layers (needs libcmocka-dev);
#                        no root, installs nothing
#   make unit            the same as make check
#   make test            install missing test dependencies, build, run every test (unit + integration)
#   make integration     install missing test dependencies, build, run only the integration tests
#   make test-repeat [TESTS="test_a.py ..."] [N=3]   build, run integration tests N times under load
#                        (default: the ones changed against origin/main or by the last commit)
#   make tests           build the unit tests and the benchmarks, run nothing (needs libcmocka-dev)
#   make demo            install curl and python3 if missing, build, show sluice throttling a download
#   make sanitize        the suite under ASan+UBSan, the core's thread tests under TSan (asan, tsan: the same)
#   make fuzz            libFuzzer (clang) over every parser, FUZZ_SECONDS each
#   make bench           benchmarks (never part of make test)
#   make transparency    CPython's socket, selectors, asyncio tests with and without sluice, and Go's net
#                        tests with and without sluice --supervise, compared
#   make check-layers    the floors core < policy < engine < common < shim|supervise < cli; SPDX lines
#   make format-check    list the C files clang-format (.clang-format) would change; changes nothing
#   make compile_commands.json   the compilation database for clangd and clang-tidy, from make -n
#   make deb             build/sluice_VERSION_ARCH.deb with dpkg-deb, checked with lintian
#   make install PREFIX=/usr/local [DESTDIR=...] [LIBDIR=PREFIX/lib]
#   make deps            install the test dependencies (scripts/deps.sh test)
#   make clean           remove build/
#   make need-cmocka     (used by check) fail, naming the package, if cmocka cannot be compiled against
#
# Files generated from variables (sluice-core.pc from PREFIX, LIBDIR and VERSION;
# every object from CC and the flags, which carry VERSION) are rebuilt when the
# variable changes: each depends on a stamp rewritten only when its value does.

VERSION := 0.1.0
CC ?= cc
BUILD ?= build
PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
FUZZ_SECONDS ?= 60
SAN_FLAGS ?=
EXTRA_CFLAGS ?=

WARN := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
CFLAGS ?= -O2 -g
# The warm-up limiter's 16-byte CAS (core/warmup.c) is cmpxchg16b on x86-64.
ARCH_CFLAGS := $(if $(filter x86_64%,$(shell $(CC) -dumpmachine)),-mcx16)
ALL_CFLAGS := -std=c11 -D_GNU_SOURCE -fPIC -pthread $(WARN) $(ARCH_CFLAGS) $(CFLAGS) $(SAN_FLAGS) $(EXTRA_CFLAGS) \
	-DSL_VERSION='"$(VERSION)"' -Icore -Ipolicy -Iengine -Icommon -Ishim -Isupervise
LDLIBS_ALL := -ldl -pthread

CORE_SRC := $(wildcard core/*.c)
POLICY_SRC := $(wildcard policy/*.c)
ENGINE_SRC := $(wildcard engine/*.c)
COMMON_SRC := $(wildcard common/*.c)
SHIM_SRC := $(wildcard shim/*.c)
SUP_SRC := $(wildcard supervise/*.c)
CLI_SRC := $(wildcard cli/*.c)
TEST_SRC := $(wildcard tests/test_*.c)
BENCH_SRC := $(wildcard bench/*.c)
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
CORE_OBJ := $(call obj,$(CORE_SRC))
POLICY_OBJ := $(call obj,$(POLICY_SRC))
ENGINE_OBJ := $(call obj,$(ENGINE_SRC))
COMMON_OBJ := $(call obj,$(COMMON_SRC))
SHIM_OBJ := $(call obj,$(SHIM_SRC))
SUP_OBJ := $(call obj,$(SUP_SRC))
CLI_OBJ := $(call obj,$(CLI_SRC))

CORE_A := $(BUILD)/libsluice-core.a
CORE_SO := $(BUILD)/libsluice-core.so
POLICY_A := $(BUILD)/libsluice-policy.a
ENGINE_A := $(BUILD)/libsluice-engine.a
COMMON_A := $(BUILD)/libsluice-common.a
# What every front end links below its own code, in link order: the floor
# of segments and the shm format (common/), the decision engine (engine/),
# the rules (policy/), the limiters (core/).
FLOOR_A := $(COMMON_A) $(ENGINE_A) $(POLICY_A) $(CORE_A)
SHIM_A := $(BUILD)/libsluice-shim.a
SUP_A := $(BUILD)/libsluice-supervise.a
SHIM_SO := $(BUILD)/libsluice.so
CLI := $(BUILD)/sluice
UNIT_TESTS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))
BENCHES := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))

.PHONY: all check unit tests demo test integration test-repeat sanitize sanitize-build asan tsan fuzz bench transparency check-layers \
	format-check deb install clean deps need-cmocka FORCE
.DEFAULT_GOAL := all

all: $(CORE_A) $(CORE_SO) $(POLICY_A) $(if $(SHIM_SRC),$(SHIM_SO)) $(if $(CLI_SRC),$(CLI)) \
	$(BUILD)/sluice-core.pc

tests: $(UNIT_TESTS) $(BENCHES)

# stamp NAME VALUE: $(BUILD)/NAME.stamp holds VALUE and is rewritten only
# when VALUE changes, so a rule depending on it reruns exactly then.
define stamp
$(BUILD)/$(1).stamp: FORCE
	@mkdir -p $$(dir $$@)
	@printf '%s\n' '$(subst ','\'',$(2))' | cmp -s - $$@ || printf '%s\n' '$(subst ','\'',$(2))' > $$@
endef
$(eval $(call stamp,flags,$(CC) $(ALL_CFLAGS) $(LDLIBS_ALL)))
$(eval $(call stamp,pc,$(PREFIX) $(LIBDIR) $(VERSION)))

$(BUILD)/obj/%.o: %.c $(BUILD)/flags.stamp
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

# The page is assembled into the launcher (.incbin), which -MMD cannot see.
$(BUILD)/obj/cli/dashboard.o: cli/dashboard.html

# Everything is hidden unless a header says otherwise: the core exports its
# documented API (sluice_core.h), the shim the interposed libc names.
$(BUILD)/obj/shim/%.o $(BUILD)/obj/core/%.o $(BUILD)/obj/policy/%.o $(BUILD)/obj/engine/%.o \
	$(BUILD)/obj/common/%.o: ALL_CFLAGS += -fvisibility=hidden

$(CORE_A): $(CORE_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
$(CORE_SO): $(CORE_OBJ)
	$(CC) $(ALL_CFLAGS) -shared -Wl,-soname,libsluice-core.so.0 -o $@ $^
$(POLICY_A): $(POLICY_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
$(ENGINE_A): $(ENGINE_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
$(COMMON_A): $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
$(SHIM_A): $(SHIM_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
$(SUP_A): $(SUP_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
# libsluice.so exports only the interposed libc names: the core's API comes
# from an archive and is made local (--exclude-libs).
$(SHIM_SO): $(SHIM_OBJ) $(FLOOR_A)
	$(CC) $(ALL_CFLAGS) -shared -Wl,-z,now -Wl,--exclude-libs,ALL -Wl,-soname,libsluice.so -o $@ $(SHIM_OBJ) $(FLOOR_A) $(LDLIBS_ALL)
# The launcher carries the supervisor (supervised mode), never the shim, but
# for the files of shim/ that open the private directory of shared memory
# segments (sluice stat, set, rm; the supervisor's records and shared=).
$(CLI): $(CLI_OBJ) $(SUP_OBJ) $(FLOOR_A)
	$(CC) $(ALL_CFLAGS) -o $@ $(CLI_OBJ) $(SUP_OBJ) $(FLOOR_A) $(LDLIBS_ALL)

# Unit tests link the archives: only what a test references is pulled in, so
# a policy test never interposes libc. The supervisor's archive comes after
# the shim's: the libc calls of its members are never resolved by the shim.
$(BUILD)/tests/%: tests/%.c $(if $(SHIM_SRC),$(SHIM_A)) $(SUP_A) $(FLOOR_A) $(BUILD)/flags.stamp
	@mkdir -p $(dir $@) $(BUILD)/obj/tests
	$(CC) $(ALL_CFLAGS) -Itests -MMD -MP -MF $(BUILD)/obj/tests/$*.d -o $@ $< $(if $(SHIM_SRC),$(SHIM_A)) $(SUP_A) $(FLOOR_A) -lcmocka $(LDLIBS_ALL)

# A bench program links the shim archive only if it includes a header of
# the shim (bench/lease_hot.c): in any other the archive's send()
# and friends would replace libc's, and a run under LD_PRELOAD would be
# throttled twice.
BENCH_SHIM := $(if $(SHIM_SRC),$(patsubst bench/%.c,$(BUILD)/bench/%,\
	$(shell grep -l '"../shim/' $(BENCH_SRC) /dev/null)))
$(BENCH_SHIM): private BENCH_LIBS := $(SHIM_A)
$(BENCH_SHIM): $(SHIM_A)

$(BUILD)/bench/%: bench/%.c $(FLOOR_A) $(BUILD)/flags.stamp
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Ibench -o $@ $< $(BENCH_LIBS) $(FLOOR_A) $(LDLIBS_ALL)

$(BUILD)/sluice-core.pc: $(BUILD)/pc.stamp
	@mkdir -p $(dir $@)
	printf 'prefix=%s\nlibdir=%s\nincludedir=$${prefix}/include\n\nName: sluice-core\nDescription: lock-free rate-limiting core of sluice\nVersion: %s\nLibs: -L$${libdir} -lsluice-core\nCflags: -I$${includedir}\n' \
		'$(PREFIX)' '$(patsubst $(PREFIX)/%,$${prefix}/%,$(LIBDIR))' '$(VERSION)' > $@

deps:
	@scripts/deps.sh test

# The README's first command: sluice throttling curl on loopback. It needs
# curl and python3 only, and prints only the demo.
demo:
	@scripts/deps.sh demo
	@$(MAKE) -s all >/dev/null
	@scripts/demo.sh $(BUILD)

test: deps
	$(MAKE) all tests
	scripts/run-tests.sh $(BUILD)

integration: deps
	$(MAKE) all tests
	SL_TEST_INTEGRATION_ONLY=1 scripts/run-tests.sh $(BUILD)

# Integration tests again and again, to catch a flaky check before make
# test does (scripts/repeat-tests.sh): each of TESTS N times, two copies at
# once beside a busy loop per CPU (alone if run-tests.sh runs it after the
# others); by default the ones changed against origin/main or by the last
# commit, and in the work tree. REPEAT_SECONDS bounds it: no run starts that would
# end later, by the test's last time (CI: 60). Installs nothing.
N ?= 3
REPEAT_SECONDS ?= 0
test-repeat: all
	SL_REPEAT='$(N)' SL_REPEAT_SECONDS='$(REPEAT_SECONDS)' scripts/repeat-tests.sh $(BUILD) $(TESTS)

# cmocka's header compiles only after the C headers it uses.
need-cmocka:
	@printf '#include <stdarg.h>\n#include <stddef.h>\n#include <stdint.h>\n#include <setjmp.h>\n#include <cmocka.h>\nint main(void) { return 0; }\n' | \
		$(CC) -x c -o /dev/null - -lcmocka 2>/dev/null || { \
		echo "make check: the unit tests need cmocka (cmocka.h and -lcmocka), not found by $(CC)."; \
		echo "make check: on Debian/Ubuntu: apt-get install libcmocka-dev (or: scripts/deps.sh test)"; \
		exit 1; }

check: need-cmocka
	$(MAKE) all $(UNIT_TESTS)
	SL_TEST_UNIT_ONLY=1 scripts/run-tests.sh $(BUILD)
	$(MAKE) check-layers
unit: check

# ASan+UBSan over the unit tests and the shim's and Redis's integration
# tests (real programs preloading the ASan build), TSan over the thread
# tests (the core's, the shim's clock and lease thread).
sanitize: deps
	$(MAKE) sanitize-build
	SL_TEST_UNIT_ONLY=1 scripts/run-tests.sh build/asan
	# The shim's integration tests preload the ASan build (runtime first);
	# the Redis client and lease thread too (test_redis.py: faults, fork).
	SL_TEST_INTEGRATION_ONLY=1 SL_TEST_FILTER='test_shim_ test_redis.' scripts/run-tests.sh build/asan
	# A race report inside a test that links the shim can hang (TSan's
	# symbolizer opens files through the shim's wrappers): 5 minutes each.
	SL_TEST_TIMEOUT=300 SL_TEST_FILTER=thread SL_TEST_UNIT_ONLY=1 scripts/run-tests.sh build/tsan
asan: sanitize
tsan: sanitize
# The two builds alone (CI makes them beside make test, at idle priority).
sanitize-build:
	$(MAKE) BUILD=build/asan SAN_FLAGS='-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer' all tests
	$(MAKE) BUILD=build/tsan SAN_FLAGS='-fsanitize=thread' CFLAGS='-O1 -g' \
		$(patsubst $(BUILD)/%,build/tsan/%,$(filter %thread,$(UNIT_TESTS)))

# libFuzzer: each tests/fuzz/fuzz_NAME.c runs FUZZ_SECONDS on its corpus
# tests/fuzz/corpus/NAME (copied, so the tree is never written), FUZZ_JOBS
# targets at a time (one per CPU: a fuzzer keeps a core busy), each one's
# output printed when it ends.
FUZZ_CC ?= clang
FUZZ_JOBS ?= $(shell nproc 2>/dev/null || echo 1)
FUZZ_FLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined \
	-fno-sanitize-recover=all $(ARCH_CFLAGS) -Icore -Ipolicy
FUZZ_RUNS := $(patsubst tests/fuzz/fuzz_%.c,fuzz-run-%,$(FUZZ_SRC))
FUZZ_BINS := $(patsubst tests/fuzz/fuzz_%.c,$(BUILD)/fuzz/fuzz_%,$(FUZZ_SRC))
.PHONY: $(FUZZ_RUNS) fuzz-build
fuzz:
	@scripts/deps.sh fuzz
	@# Its own job count, not the caller's jobserver: the settings passed on.
	@MAKEFLAGS= $(MAKE) --no-print-directory -j$(FUZZ_JOBS) -Otarget BUILD='$(BUILD)' \
		FUZZ_CC='$(FUZZ_CC)' FUZZ_SECONDS='$(FUZZ_SECONDS)' $(FUZZ_RUNS)
# The fuzzers alone, not run (CI builds them beside the tests).
fuzz-build: $(FUZZ_BINS)
$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(POLICY_SRC) $(CORE_SRC) $(wildcard core/*.h policy/*.h)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $< $(POLICY_SRC) $(CORE_SRC)
$(FUZZ_RUNS): fuzz-run-%: $(BUILD)/fuzz/fuzz_%
	@rm -rf $(BUILD)/fuzz/fuzz_$*.corpus; mkdir -p $(BUILD)/fuzz/fuzz_$*.corpus
	@if [ -d tests/fuzz/corpus/$* ]; then cp tests/fuzz/corpus/$*/* $(BUILD)/fuzz/fuzz_$*.corpus/; fi
	@echo "fuzz: fuzz_$* for $(FUZZ_SECONDS)s"
	@$(BUILD)/fuzz/fuzz_$* -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
		-artifact_prefix=$(BUILD)/fuzz/fuzz_$*- $(BUILD)/fuzz/fuzz_$*.corpus

# CPython's socket, selectors and asyncio tests with and without the
# library under never-limiting rules, compared test by test (about 10 min).
transparency: all
	@scripts/deps.sh test
	python3 scripts/transparency.py $(BUILD)
	python3 scripts/transparency_go.py $(BUILD)

bench: all $(BENCHES)
	@scripts/deps.sh bench
	scripts/run-bench.sh $(BUILD)

# The floors of the tree (core < policy < engine < common < shim|supervise <
# cli), each folder's purity, SPDX lines, the budget of include circles:
# scripts/check-layers.py says which and why.
check-layers:
	@python3 scripts/check-layers.py

# The preload library goes to PREFIX/lib/sluice/ whatever LIBDIR is: the
# launcher looks for it in BINDIR/../lib/sluice/ (cli/env.c).
install: all
	install -d $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin \
		$(DESTDIR)$(PREFIX)/lib/sluice $(DESTDIR)$(PREFIX)/share/man/man1 \
		$(DESTDIR)$(PREFIX)/share/bash-completion/completions
	install -m 644 $(CORE_A) $(DESTDIR)$(LIBDIR)/
	install -m 644 $(CORE_SO) $(DESTDIR)$(LIBDIR)/libsluice-core.so.0
	ln -sf libsluice-core.so.0 $(DESTDIR)$(LIBDIR)/libsluice-core.so
	install -m 644 core/sluice_core.h core/sluice_fast.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(BUILD)/sluice-core.pc $(DESTDIR)$(LIBDIR)/pkgconfig/
	if [ -f $(SHIM_SO) ]; then install -m 644 $(SHIM_SO) $(DESTDIR)$(PREFIX)/lib/sluice/; fi
	if [ -f $(CLI) ]; then install -m 755 $(CLI) $(DESTDIR)$(PREFIX)/bin/; fi
	if [ -f cli/sluice.1 ]; then install -m 644 cli/sluice.1 $(DESTDIR)$(PREFIX)/share/man/man1/; fi
	install -m 644 cli/sluice.bash-completion $(DESTDIR)$(PREFIX)/share/bash-completion/completions/sluice

# clang-format (.clang-format) over every C file: lists the files it would
# change and how many lines, changes nothing; fails if any would change.
FORMAT_SRC := $(wildcard core/*.[ch] policy/*.[ch] engine/*.[ch] common/*.[ch] shim/*.[ch] supervise/*.[ch] cli/*.[ch] tests/*.[ch] \
	tests/fuzz/*.c bench/*.[ch])
CLANG_FORMAT ?= clang-format
format-check:
	@command -v $(CLANG_FORMAT) >/dev/null || { echo "format-check: needs $(CLANG_FORMAT) (apt-get install clang-format, or scripts/deps.sh format)"; exit 1; }
	@n=0; lines=0; for f in $(FORMAT_SRC); do \
		d=$$($(CLANG_FORMAT) --style=file "$$f" | diff "$$f" - | grep -c '^<'); \
		if [ "$$d" -gt 0 ]; then echo "format-check: $$f: $$d lines differ"; n=$$((n + 1)); lines=$$((lines + d)); fi; \
	done; \
	echo "format-check: $$n of $(words $(FORMAT_SRC)) files, $$lines lines differ from .clang-format"; \
	[ "$$n" -eq 0 ]

# The compilation database (clangd, clang-tidy) from what make would run:
# every compiler line of a from-scratch build of all, tests and benches.
compile_commands.json: FORCE
	@$(MAKE) -s --no-print-directory -B -n BUILD=$(BUILD) all tests | \
		python3 scripts/compile-db.py "$(CURDIR)" > $@.tmp && mv $@.tmp $@
	@echo "compile_commands.json: $$(grep -c '"file"' $@) entries"

# A Debian package of the tree, with dpkg-deb and checked with lintian
# (scripts/mkdeb.sh); built in BUILD/deb with PREFIX=/usr.
deb:
	@scripts/mkdeb.sh $(BUILD) $(VERSION)

clean:
	rm -rf build

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
