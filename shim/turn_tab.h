/* SPDX-License-Identifier: MIT */
/*
 * turn_tab.h - the table of connections with turns (conns:adaptive), shared
 * by turn.c (turns start and end) and turnclose.c (a connection's last
 * close, across processes). Its memory is shared by a fork's children.
 *
 * API: any thread and process of the family; entries change by CAS.
 */
#ifndef SLUICE_SHIM_TURN_TAB_H
#define SLUICE_SHIM_TURN_TAB_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "adaptive.h"
#include "sockdiag.h"
#include "state.h"

#define TURN_ENTS 4096u /* connections with turns at once, per fork family */
#define TURN_PROBES 64u /* entries looked at for one socket */
#define TS_IDLE 1u
#define TS_TURN 2u

struct turn_ent {
	_Atomic uint64_t key;      /* the socket's inode + 1; 0: free */
	_Atomic uint64_t state;    /* seq << 8 | TS_*: each change bumps seq */
	_Atomic uint64_t start_ns; /* the running turn's first bytes, 0: none yet */
	/* Slots a turn holds: on a server's connection bit i < 32, adaptive
	 * rule i's; bit 32 + i, rule i's system protection's (TURN_GATE); on
	 * a client's, bit i is rule i's client limit (TURN_CLIENT + i). */
	_Atomic uint64_t rules;
	/* 1: a process closed its last fd of the connection while another
	 * (a fork child, or a program it exec'd) held it; id says which
	 * socket to ask the kernel about (turn_sweep). */
	_Atomic uint32_t orphan;
	/* 1: a connection the program opened (connect): its turns run from a
	 * request's send to the answer's first bytes; 2: one such that only
	 * sends (a turn went unanswered for long): no more turns; 0: an
	 * accepted one. */
	_Atomic uint32_t client;
	/* The accepting process's epoch then (sl__turn_epoch): a close in a
	 * process of that epoch is the last (no fork came since). */
	_Atomic uint64_t epoch;
	struct sl_sockid id;
};

/* Slot indexes: rule i's system protection (load1=, cpu=, rt=) is at
 * TURN_GATE + i, its own limiter and controller (SL_ADAPT_SYSTEM) beside
 * the rule's limit; an adaptive rule's client limit (the requests of the
 * connections the program opens) at TURN_CLIENT + i, apart from its
 * server's (a proxy's upstream requests must not wait for the slots its
 * own server turns hold). A connection's slot bit b is index b + its
 * base: 0 for a server's connection, TURN_CLIENT for a client's. */
#define TURN_GATE 32u
#define TURN_CLIENT 64u
#define TURN_SLOTS (3u * SL_MAX_RULES)

struct turn_fam {
	/* Per=process adaptive rules at i, system protections at
	 * TURN_GATE + i, client limits at TURN_CLIENT + i. */
	struct sl_tunable lim[TURN_SLOTS];
	struct sl_adapt adapt[TURN_SLOTS];
	_Atomic uint32_t orphans;  /* entries with orphan set */
	_Atomic uint64_t epochs;   /* epochs handed out (turnclose.c) */
	_Atomic uint64_t swept_ns; /* the last sweep */
	struct turn_ent ent[TURN_ENTS];
};

/* The family's table (NULL: no adaptive rule), and each adaptive rule's
 * controller (the family's, or a shared= segment's). */
extern struct turn_fam *sl__turn_fam;
extern struct sl_adapt *sl__turn_adapt[TURN_SLOTS];

/* The limiter of slot index x (an adaptive rule's, a protection's, a
 * client limit). */
static inline struct sl_limiter *sl__turn_lim(unsigned x)
{
	return x < TURN_GATE ? sl__st.rule_lim[x] : &sl__turn_fam->lim[x].head;
}

/* Slots (turnslot.c), by bit + base: see TURN_GATE. Give back one of each
 * bit in `slots`; take one of each now, or none (a liveness sweep first
 * when one is full; a refusal tells its controller the limit binds). */
void sl__turn_release(unsigned base, uint64_t slots);
bool sl__turn_take(unsigned base, uint64_t slots, uint64_t now);
/* A turn holding `slots` started: the controllers see how many run. */
void sl__turn_started(unsigned base, uint64_t slots);
/* A turn of slot index x ended (sample: it had bytes from start_ns): feed
 * its controller, retune its limiter if it asks, publish the view. */
void sl__turn_done(unsigned x, uint64_t start_ns, uint64_t now);
/* The host's figures for the system protections (load1=, cpu=): read
 * (sysinfo, /proc/stat) at most every SL_ADAPT_HOST_EVERY_NS per process,
 * by one thread, and handed to each, which tightens at once if the host is
 * over (sl_adapt_host_check). Not in a seccomp sandbox (no call of ours
 * there): the figures stay unknown. */
void sl__turn_host(uint64_t now);
/* How long a turn that finds no slot of `slots` may wait (the engine's). */
uint64_t sl__turn_wait_ns(unsigned base, uint64_t slots);

/* Client turns unanswered for long give their slots back (turnclose.c):
 * true if any did. */
bool sl__turn_expire(uint64_t now);

/* The entry of socket inode ino, or NULL. */
struct turn_ent *sl__turn_find(uint64_t ino);
/* End e's running turn, if one runs: its slots go back, its latency to
 * the controllers. */
void sl__turn_end(struct turn_ent *e, uint64_t now);
/* This process's epoch: a new one at init and on each side of a fork
 * (turnclose.c), so that two processes never share one. */
uint64_t sl__turn_epoch(void);
/* The forget hook (turnclose.c). */
void sl__turn_forget(int fd);

#endif /* SLUICE_SHIM_TURN_TAB_H */
