/* SPDX-License-Identifier: MIT */
/*
 * match.c - which rules a call matches.
 *
 * A rule fits a socket when its family= and type= bits include the
 * socket's (0 means any); it fits an address when to=CIDR and port=/:PORT
 * include it. The address is the destination for connect, the listening
 * socket's local address for accept (to=/port= name what is listened on),
 * and the peer for send/recv. An unknown address (an unconnected datagram
 * socket that receives) fits only rules without an address filter.
 */
#include <string.h>

#include "match.h"
#include "state.h"

static bool rule_fits(const struct sl_rule *r, unsigned family, unsigned type)
{
	return sl_rule_fits_socket(r, family, type);
}

static bool rule_addr(const struct sl_rule *r, const struct sl_addr *a)
{
	static const uint8_t none[16];
	return a != NULL ? sl_rule_fits_addr(r, a->family, a->port, a->addr)
			 : sl_rule_fits_addr(r, 0, 0, none);
}

uint32_t sl__match_socket(unsigned family, unsigned type)
{
	uint32_t m = 0;
	for (uint32_t i = 0; i < sl__st.policy.n_rules; i++)
		if (rule_fits(&sl__st.policy.rules[i], family, type))
			m |= (uint32_t)1 << i;
	return m;
}

uint32_t sl__match(uint32_t cand, unsigned family, unsigned type, const struct sl_addr *a)
{
	uint32_t m = 0;
	for (uint32_t rest = cand; rest != 0; rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		const struct sl_rule *r = &sl__st.policy.rules[i];
		if (rule_fits(r, family, type) && rule_addr(r, a))
			m |= (uint32_t)1 << i;
	}
	return m;
}
