/* SPDX-License-Identifier: MIT */
/*
 * bitset.h - a set of fd numbers (or record indexes) as atomic 64-bit
 * words, with a high-water mark of the words in use, so that a scan of the
 * set stops there: ready.c's armed fds, connwait.c's pending records.
 *
 * API: thread-safe, lock-free; seq_cst, so that a scanner that resets the
 * mark and then scans, against a setter that raises the mark and then sets
 * the bit, sees the bit or leaves the raised mark (the callers' arguments
 * rest on it).
 */
#ifndef SLUICE_SHIM_BITSET_H
#define SLUICE_SHIM_BITSET_H

#include <stdatomic.h>
#include <stdint.h>

/* Add i to bits, raising *words to cover it first. */
static inline void sl__bits_set(_Atomic uint64_t *bits, _Atomic uint32_t *words, uint32_t i)
{
	uint32_t w = atomic_load(words), need = i / 64 + 1;
	while (w < need && !atomic_compare_exchange_weak(words, &w, need))
		;
	atomic_fetch_or(&bits[i / 64], (uint64_t)1 << (i % 64));
}

static inline void sl__bits_clear(_Atomic uint64_t *bits, uint32_t i)
{
	atomic_fetch_and(&bits[i / 64], ~((uint64_t)1 << (i % 64)));
}

#endif /* SLUICE_SHIM_BITSET_H */
