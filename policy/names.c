/* SPDX-License-Identifier: MIT */
/*
 * names.c - the names of operations, algorithms, actions, scopes, families
 * and socket types, shared by the parser, the canonical printer, messages and
 * stats. The order of every table is the order of its enum or bit values.
 */
#include "internal.h"

const char *const sl__op_names[SL_OP_COUNT] = {"connect", "accept", "send", "recv", "conns"};
const char *const sl__op_vars[SL_OP_COUNT] = {"SLUICE_CONNECT", "SLUICE_ACCEPT", "SLUICE_SEND",
					      "SLUICE_RECV", "SLUICE_CONNS"};
const char *const sl__algo_names[4] = {"token", "leaky", "fixed", "sliding"};
const char *const sl__adapt_algo_names[3] = {"gradient2", "vegas", "aimd"};
const char *const sl__action_names[3] = {"delay", "reject", "dry-run"};
const char *const sl__scope_names[4] = {"process", "thread", "fd", "peer"};
const char *const sl__nonblock_names[2] = {"eagain", "sleep"};
const char *const sl__family_names[3] = {"inet", "inet6", "unix"};
const char *const sl__type_names[2] = {"stream", "dgram"};
const char *const sl__on_error_names[3] = {"local", "open", "closed"};

/* Out-of-range values get "?" rather than undefined behaviour. */
static const char *name_of(const char *const *names, size_t n, unsigned v)
{
	return v < n ? names[v] : "?";
}

const char *sl_op_name(enum sl_op op)
{
	return name_of(sl__op_names, SL_OP_COUNT, (unsigned)op);
}

const char *sl_algo_name(enum sl_algo a)
{
	return name_of(sl__algo_names, 4, (unsigned)a);
}

const char *sl_adapt_algo_name(enum sl_adapt_algo a)
{
	return name_of(sl__adapt_algo_names, 3, (unsigned)a);
}

const char *sl_action_name(enum sl_action a)
{
	return name_of(sl__action_names, 3, (unsigned)a);
}

const char *sl_scope_name(enum sl_scope s)
{
	return name_of(sl__scope_names, 4, (unsigned)s);
}

const char *sl_on_error_name(enum sl_on_error e)
{
	return name_of(sl__on_error_names, 3, (unsigned)e);
}

/* connect, accept and conns are about connections, hence streams; send and
 * recv also count datagrams. */
uint8_t sl__default_types(enum sl_op op)
{
	if (op == SL_OP_SEND || op == SL_OP_RECV)
		return SL_TYPE_STREAM | SL_TYPE_DGRAM;
	return SL_TYPE_STREAM;
}
