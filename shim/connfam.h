/* SPDX-License-Identifier: MIT */
/*
 * connfam.h - conns slots of connections a fork shares (connfam.c): the
 * slot frees when the last process holding the connection closes it, not
 * when the first does.
 *
 * API: thread- and process-safe (the table is shared memory every fork
 * child inherits); _unsync: init only.
 */
#ifndef SLUICE_SHIM_CONNFAM_H
#define SLUICE_SHIM_CONNFAM_H

#include <stdbool.h>
#include <stdint.h>

/* conns rules whose slots a fork shares: per=process (the limiter of the
 * process that took the slot) and shared=NAME. */
uint32_t sl__fam_rules(void);
/* Map the table if some rule is one of them (once: a re-init keeps it). 0
 * or -1. */
int sl__fam_init_unsync(void);
/* Before fork: an entry holding `rules`' slots (one each) of the
 * connection fd is, or 0 if it cannot be told when it ends (then they stay
 * the process's own, as without a fork). */
uint32_t sl__fam_share(int fd, uint32_t rules);
/* Of `rules` (entry e's), those whose slot e gives back in this process:
 * the shared= ones, and the per=process ones if this is the process that
 * took them; the others a process gives back at its own last close. */
uint32_t sl__fam_decides(uint32_t e, uint32_t rules);
/* A process's last fd of entry e closed: its slots are given back if no
 * process holds the connection any more. True if any were, here. */
bool sl__fam_drop(uint32_t e);
/* Entry e's last fd in this process is being closed: asked once the real
 * close is done (sl__fam_after_close, from the close wrappers' hook). */
void sl__fam_defer(uint32_t e);
/* Ask about the deferred entries; true if slots were given back. */
bool sl__fam_after_close(void);
/* A call waits for a slot of rule i: give back the slots this process owns
 * of entries another process found gone, and (at most every
 * SL_FAM_SWEEP_NS) those of connections that ended unseen (their last
 * holder exited, crashed or exec'd). True if any of rule i's were. */
bool sl__fam_sweep(unsigned i, uint64_t now_ns);

#define SL_FAM_SWEEP_NS 5000000u
#define SL_FAM_ENTRIES 4096u

#endif /* SLUICE_SHIM_CONNFAM_H */
