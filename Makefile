# sluice - one non-recursive GNU Makefile. Sources are found by wildcard, so a
# new file in core/, policy/, shim/, cli/, tests/ or bench/ needs no edit here.
#
#   make                 build everything into build/
#   make demo            build, then show sluice throttling a curl download
#   make test            install missing test dependencies, build, run every test
#   make sanitize        the suite under ASan+UBSan, the core's thread tests under TSan
#   make fuzz            libFuzzer (clang) over every parser, FUZZ_SECONDS each
#   make bench           benchmarks (never part of make test)
#   make check-layers    keep core/ and policy/ free of what belongs to the shim
#   make install PREFIX=/usr/local [DESTDIR=...]

VERSION := 0.1.0
CC ?= cc
BUILD ?= build
PREFIX ?= /usr/local
FUZZ_SECONDS ?= 60
SAN_FLAGS ?=
EXTRA_CFLAGS ?=

WARN := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
CFLAGS ?= -O2 -g
ALL_CFLAGS := -std=c11 -D_GNU_SOURCE -fPIC -pthread $(WARN) $(CFLAGS) $(SAN_FLAGS) $(EXTRA_CFLAGS) \
	-DSL_VERSION='"$(VERSION)"' -Icore -Ipolicy -Ishim
LDLIBS_ALL := -ldl -pthread

CORE_SRC := $(wildcard core/*.c)
POLICY_SRC := $(wildcard policy/*.c)
SHIM_SRC := $(wildcard shim/*.c)
CLI_SRC := $(wildcard cli/*.c)
TEST_SRC := $(wildcard tests/test_*.c)
BENCH_SRC := $(wildcard bench/*.c)
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
CORE_OBJ := $(call obj,$(CORE_SRC))
POLICY_OBJ := $(call obj,$(POLICY_SRC))
SHIM_OBJ := $(call obj,$(SHIM_SRC))
CLI_OBJ := $(call obj,$(CLI_SRC))

CORE_A := $(BUILD)/libsluice-core.a
CORE_SO := $(BUILD)/libsluice-core.so
POLICY_A := $(BUILD)/libsluice-policy.a
SHIM_A := $(BUILD)/libsluice-shim.a
SHIM_SO := $(BUILD)/libsluice.so
CLI := $(BUILD)/sluice
TESTS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))
BENCHES := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))

.PHONY: all demo test unit integration sanitize asan tsan fuzz bench check-layers install clean deps
.DEFAULT_GOAL := all

all: $(CORE_A) $(CORE_SO) $(POLICY_A) $(if $(SHIM_SRC),$(SHIM_SO)) $(if $(CLI_SRC),$(CLI)) \
	$(TESTS) $(BENCHES) $(BUILD)/sluice-core.pc

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

# Everything is hidden unless a header says otherwise: the core exports its
# documented API (sluice_core.h), the shim the interposed libc names.
$(BUILD)/obj/shim/%.o $(BUILD)/obj/core/%.o $(BUILD)/obj/policy/%.o: ALL_CFLAGS += -fvisibility=hidden

$(CORE_A): $(CORE_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
$(CORE_SO): $(CORE_OBJ)
	$(CC) $(ALL_CFLAGS) -shared -Wl,-soname,libsluice-core.so.0 -o $@ $^
$(POLICY_A): $(POLICY_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
$(SHIM_A): $(SHIM_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
# libsluice.so exports only the interposed libc names: the core's API comes
# from an archive and is made local (--exclude-libs).
$(SHIM_SO): $(SHIM_OBJ) $(POLICY_A) $(CORE_A)
	$(CC) $(ALL_CFLAGS) -shared -Wl,-z,now -Wl,--exclude-libs,ALL -Wl,-soname,libsluice.so -o $@ $(SHIM_OBJ) $(POLICY_A) $(CORE_A) $(LDLIBS_ALL)
$(CLI): $(CLI_OBJ) $(POLICY_A) $(CORE_A)
	$(CC) $(ALL_CFLAGS) -o $@ $(CLI_OBJ) $(POLICY_A) $(CORE_A) $(LDLIBS_ALL)

# Unit tests link the archives: only what a test references is pulled in, so
# a policy test never interposes libc.
$(BUILD)/tests/%: tests/%.c $(if $(SHIM_SRC),$(SHIM_A)) $(POLICY_A) $(CORE_A)
	@mkdir -p $(dir $@) $(BUILD)/obj/tests
	$(CC) $(ALL_CFLAGS) -Itests -MMD -MP -MF $(BUILD)/obj/tests/$*.d -o $@ $< $(if $(SHIM_SRC),$(SHIM_A)) $(POLICY_A) $(CORE_A) -lcmocka $(LDLIBS_ALL)

# A bench program links the shim archive only if it includes a header of
# the shim (bench/lease_hot.c): in any other the archive's send()
# and friends would replace libc's, and a run under LD_PRELOAD would be
# throttled twice.
BENCH_SHIM := $(if $(SHIM_SRC),$(patsubst bench/%.c,$(BUILD)/bench/%,\
	$(shell grep -l '"../shim/' $(BENCH_SRC) /dev/null)))
$(BENCH_SHIM): private BENCH_LIBS := $(SHIM_A)
$(BENCH_SHIM): $(SHIM_A)

$(BUILD)/bench/%: bench/%.c $(POLICY_A) $(CORE_A)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Ibench -o $@ $< $(BENCH_LIBS) $(POLICY_A) $(CORE_A) $(LDLIBS_ALL)

$(BUILD)/sluice-core.pc: Makefile
	@mkdir -p $(dir $@)
	printf 'prefix=%s\nlibdir=$${prefix}/lib\nincludedir=$${prefix}/include\n\nName: sluice-core\nDescription: lock-free rate-limiting core of sluice\nVersion: %s\nLibs: -L$${libdir} -lsluice-core\nCflags: -I$${includedir}\n' \
		'$(PREFIX)' '$(VERSION)' > $@

deps:
	@scripts/deps.sh test

# The README's first command: sluice throttling curl on loopback.
demo: deps all
	@scripts/demo.sh $(BUILD)

test: deps
	$(MAKE) all
	scripts/run-tests.sh $(BUILD)

unit: all
	SL_TEST_UNIT_ONLY=1 scripts/run-tests.sh $(BUILD)

# ASan+UBSan over the unit tests and the shim's and Redis's integration
# tests (real programs preloading the ASan build), TSan over the thread
# tests (the core's, the shim's clock and lease thread).
sanitize: deps
	$(MAKE) BUILD=build/asan SAN_FLAGS='-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer' all
	SL_TEST_UNIT_ONLY=1 scripts/run-tests.sh build/asan
	# The shim's integration tests preload the ASan build (runtime first).
	SL_TEST_FILTER=test_shim_ scripts/run-tests.sh build/asan
	# The Redis client and lease thread too (test_redis.py: faults, fork).
	SL_TEST_FILTER=test_redis. scripts/run-tests.sh build/asan
	$(MAKE) BUILD=build/tsan SAN_FLAGS='-fsanitize=thread' CFLAGS='-O1 -g' \
		$(patsubst $(BUILD)/%,build/tsan/%,$(filter %thread,$(TESTS)))
	SL_TEST_FILTER=thread SL_TEST_UNIT_ONLY=1 scripts/run-tests.sh build/tsan
asan: sanitize
tsan: sanitize

# libFuzzer: each tests/fuzz/fuzz_NAME.c runs FUZZ_SECONDS on its corpus
# tests/fuzz/corpus/NAME (copied, so the tree is never written).
FUZZ_CC ?= clang
FUZZ_FLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined \
	-fno-sanitize-recover=all -Icore -Ipolicy
fuzz:
	@scripts/deps.sh fuzz
	@mkdir -p $(BUILD)/fuzz
	@set -e; for src in $(FUZZ_SRC); do \
		name=$$(basename $$src .c); \
		$(FUZZ_CC) $(FUZZ_FLAGS) -o $(BUILD)/fuzz/$$name $$src $(POLICY_SRC) $(CORE_SRC); \
		rm -rf $(BUILD)/fuzz/$$name.corpus; mkdir -p $(BUILD)/fuzz/$$name.corpus; \
		if [ -d tests/fuzz/corpus/$${name#fuzz_} ]; then cp tests/fuzz/corpus/$${name#fuzz_}/* $(BUILD)/fuzz/$$name.corpus/; fi; \
		echo "fuzz: $$name for $(FUZZ_SECONDS)s"; \
		$(BUILD)/fuzz/$$name -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
			-artifact_prefix=$(BUILD)/fuzz/$$name- $(BUILD)/fuzz/$$name.corpus; \
	done

bench: all
	@scripts/deps.sh bench
	scripts/run-bench.sh $(BUILD)

# core/ includes only the four C11 headers (and its own); policy/ never reads
# the environment, resolves symbols or sets errno.
check-layers:
	@bad=$$(grep -HnE '^[[:space:]]*#[[:space:]]*include' core/*.c core/*.h | \
		grep -vE '<(stdint|stdbool|stddef|stdatomic)\.h>|"(sluice_core|internal)\.h"'); \
	if [ -n "$$bad" ]; then echo "check-layers: core/ includes more than C11 atomics and integers:"; echo "$$bad"; exit 1; fi
	@bad=$$(grep -HnE '\b(getenv|secure_getenv|dlsym|dlopen|environ|malloc|calloc|realloc)\b|\berrno[[:space:]]*=[^=]' policy/*.c policy/*.h); \
	if [ -n "$$bad" ]; then echo "check-layers: policy/ must be a pure function of text:"; echo "$$bad"; exit 1; fi
	@echo "check-layers: ok"

install: all
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin \
		$(DESTDIR)$(PREFIX)/lib/sluice $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 644 $(CORE_A) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(CORE_SO) $(DESTDIR)$(PREFIX)/lib/libsluice-core.so.0
	ln -sf libsluice-core.so.0 $(DESTDIR)$(PREFIX)/lib/libsluice-core.so
	install -m 644 core/sluice_core.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(BUILD)/sluice-core.pc $(DESTDIR)$(PREFIX)/lib/pkgconfig/
	if [ -f $(SHIM_SO) ]; then install -m 755 $(SHIM_SO) $(DESTDIR)$(PREFIX)/lib/sluice/; fi
	if [ -f $(CLI) ]; then install -m 755 $(CLI) $(DESTDIR)$(PREFIX)/bin/; fi
	if [ -f cli/sluice.1 ]; then install -m 644 cli/sluice.1 $(DESTDIR)$(PREFIX)/share/man/man1/; fi

clean:
	rm -rf build

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
