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
	_Atomic uint32_t rules;    /* adaptive rules whose slot a turn holds */
	/* 1: a process closed its last fd of the connection while another
	 * (a fork child, or a program it exec'd) held it; id says which
	 * socket to ask the kernel about (turn_sweep). */
	_Atomic uint32_t orphan;
	/* The accepting process's epoch then (sl__turn_epoch): a close in a
	 * process of that epoch is the last (no fork came since). */
	_Atomic uint64_t epoch;
	struct sl_sockid id;
};

struct turn_fam {
	struct sl_tunable lim[SL_MAX_RULES]; /* per=process adaptive rules */
	struct sl_adapt adapt[SL_MAX_RULES];
	_Atomic uint32_t orphans;  /* entries with orphan set */
	_Atomic uint64_t epochs;   /* epochs handed out (turnclose.c) */
	_Atomic uint64_t swept_ns; /* the last sweep */
	struct turn_ent ent[TURN_ENTS];
};

/* The family's table (NULL: no adaptive rule), and each adaptive rule's
 * controller (the family's, or a shared= segment's). */
extern struct turn_fam *sl__turn_fam;
extern struct sl_adapt *sl__turn_adapt[SL_MAX_RULES];

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
