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
	return (r->families == 0 || (r->families & family)) && (r->types == 0 || (r->types & type));
}

static bool rule_addr(const struct sl_rule *r, const struct sl_addr *a)
{
	bool any_port = r->port_lo == 0 && r->port_hi == 65535;
	if (r->to.family == 0 && any_port)
		return true;
	if (a == NULL || (a->family != 4 && a->family != 6))
		return false;
	if (!any_port && (a->port < r->port_lo || a->port > r->port_hi))
		return false;
	if (r->to.family == 0)
		return true;
	if (r->to.family != a->family)
		return false;
	unsigned bits = r->to.prefix, full = bits / 8, rest = bits % 8;
	if (memcmp(r->to.addr, a->addr, full) != 0)
		return false;
	if (rest == 0)
		return true;
	uint8_t mask = (uint8_t)(0xffu << (8 - rest));
	return (r->to.addr[full] & mask) == (a->addr[full] & mask);
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
