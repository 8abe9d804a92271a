/* SPDX-License-Identifier: MIT */
/*
 * shm_break.h - the layout of the break-PID segment (segment.h): one process's
 * circuit breakers (shim/breaker.c writes it, `sluice stat` reads it).
 *
 * Kept in a file of its own beside the stats record (shm_format.h) so that
 * the record's layout and version stay as they are. Mode 0600, created
 * with O_EXCL | O_NOFOLLOW, removed at exit (and by `sluice stat` once the
 * process is gone). Readers check owner, mode, size, magic, version and
 * every breaker (sl_breaker_validate) before use. Fixed-width fields, no
 * pointers; the breakers are the live ones (lock-free, see core/breaker.c).
 */
#ifndef SLUICE_SHM_BREAK_H
#define SLUICE_SHM_BREAK_H

#include <stdint.h>

#include "policy.h"
#include "shm_format.h"
#include "sluice_core.h"

#define SL_SHM_MAGIC_BREAK 0x4b524253u /* "SBRK" */
#define SL_SHM_BREAK_VERSION 1u
#define SL_SHM_BREAK_NAME "break-%d" /* segment name of pid's breakers */
#define SL_SHM_BREAK_PREFIX "break-"
#define SL_SHM_BREAK_PEERS 256u /* destinations per per=peer breaker */

struct sl_shm_break_peer {
	_Atomic uint64_t key; /* hash of the destination | 1; 0 = free */
	uint8_t family;       /* 4 or 6, written by the claimer before `ready` */
	uint8_t pad0;
	uint16_t port;
	uint8_t addr[16];
	_Atomic uint32_t ready; /* 1 once family/port/addr are written */
	struct sl_breaker b;
};

struct sl_shm_break_rule {
	char text[SL_RULE_TEXT_MAX]; /* canonical "break:SPEC" */
	uint32_t scope;              /* SL_SCOPE_PROCESS or SL_SCOPE_PEER */
	uint32_t reserved;
	struct sl_breaker proc;                             /* per=process */
	struct sl_shm_break_peer peers[SL_SHM_BREAK_PEERS]; /* per=peer */
};

struct sl_shm_break {
	uint32_t magic;   /* SL_SHM_MAGIC_BREAK, written last */
	uint32_t version; /* SL_SHM_BREAK_VERSION */
	uint64_t size;    /* sizeof(struct sl_shm_break) */
	uint32_t pid;
	uint32_t uid;
	uint32_t n; /* breakers in use */
	uint32_t reserved;
	struct sl_shm_break_rule rules[SL_MAX_BREAKS];
};

_Static_assert(sizeof(struct sl_breaker) == 176, "sl_breaker layout");
_Static_assert(offsetof(struct sl_shm_break_peer, b) == 32, "sl_shm_break_peer layout");
_Static_assert(offsetof(struct sl_shm_break, rules) == 32, "sl_shm_break layout");
_Static_assert(sizeof(struct sl_shm_break) == 429536, "sl_shm_break layout");

#endif /* SLUICE_SHM_BREAK_H */
