/* SPDX-License-Identifier: MIT */
/*
 * init.h - building the shim's state (init.c).
 */
#ifndef SLUICE_SHIM_INIT_H
#define SLUICE_SHIM_INIT_H

#include "internal.h"

/* Build the state from a parsed policy and map or clear every module's
 * tables (the constructor; tests call it directly). Not thread-safe: call
 * before any wrapper runs, or in tests between cases. Returns 0, or -1 if
 * memory could not be mapped. */
int sl__state_init_unsync(const struct sl_policy *p);

#endif /* SLUICE_SHIM_INIT_H */
