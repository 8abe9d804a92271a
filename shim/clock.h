/* SPDX-License-Identifier: MIT */
/*
 * clock.h - the shim's clock and sleep (clock.c).
 *
 * API: sl__clock_ns() and sl__sleep_until() from any thread (tests point
 * both at fakes); sl__clock_init in the constructor, sl__clock_fork_child in
 * a fork child. The line-fitting functions are pure, for clock.c and its
 * tests.
 */
#ifndef SLUICE_SHIM_CLOCK_H
#define SLUICE_SHIM_CLOCK_H

#include "internal.h"

/* CLOCK_MONOTONIC now, in ns (the TSC on a fitted line where it can be). */
extern uint64_t (*sl__clock_ns)(void);
/* Sleep until the absolute CLOCK_MONOTONIC instant deadline_ns: returns 0,
 * EINTR if a signal handler ran, or another error number if the system
 * refuses the sleep (a seccomp filter). */
extern int (*sl__sleep_until)(uint64_t deadline_ns);
/* Use the TSC for sl__clock_ns if the CPU and the process allow it (the
 * constructor); make the line whole again in a fork child. */
void sl__clock_init(void);
void sl__clock_fork_child(void);

/* The TSC ticks ns are worth on the clock's line: 1 (*ticks set), 0 (no
 * line fitted yet), -1 (the clock does not read the TSC, and never will). */
int sl__clock_tsc_span(uint64_t ns, uint64_t *ticks);

/* A line from TSC ticks to CLOCK_MONOTONIC ns: base_ns + (tsc - base_tsc) *
 * mult / 2^32 for tsc in [base_tsc, base_tsc + span). mult 0: not fitted. */
struct sl_clock_line {
	uint64_t base_tsc, base_ns, mult, span;
};
enum sl_fit { SL_FIT_OK, SL_FIT_WAIT, SL_FIT_OFF };
#define SL_FIT_FIRST_NS 10000000u /* the first line's shortest stretch */
#define SL_FIT_SPAN_NS 100000000u /* the longest a line is used */
#define SL_FIT_PPM 100u           /* a line off by more (plus the slack): */
#define SL_FIT_SLACK_NS 20000u    /* the TSC is not to be trusted */
#define SL_PAIR_MAX_TICKS 16384u  /* the widest sample kept (two TSC reads) */
/* The line's ns at tsc: false if tsc is outside its span. */
bool sl__clock_line_ns(const struct sl_clock_line *l, uint64_t tsc, uint64_t *ns);
/* Fit the next line through l's base and the sample (tsc, ns): SL_FIT_OK (l
 * is the new line; span 0 if the TSC went back and the base starts again),
 * SL_FIT_WAIT (too early for a first line, or a sample older than the
 * base), or SL_FIT_OFF (l is off by more than the tolerance, or the rate is
 * no TSC's). */
enum sl_fit sl__clock_line_fit(struct sl_clock_line *l, uint64_t tsc, uint64_t ns);

#endif /* SLUICE_SHIM_CLOCK_H */
