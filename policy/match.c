/* SPDX-License-Identifier: MIT */
/*
 * match.c - whether a rule applies to a socket and an address: pure
 * functions of rule data, shared by the preloaded shim and the supervisor
 * (supervise/), so both modes match calls the same way.
 *
 * A rule fits a socket when its family= and type= bits include the socket's
 * (0 means any). It fits an address when to=CIDR and port=/:PORT include
 * it; an unknown address (family 0) fits only rules without an address
 * filter.
 */
#include <string.h>

#include "policy.h"

bool sl_rule_fits_socket(const struct sl_rule *r, unsigned family, unsigned type)
{
	return (r->families == 0 || (r->families & family)) && (r->types == 0 || (r->types & type));
}

bool sl_rule_fits_addr(const struct sl_rule *r, unsigned family, uint16_t port,
		       const uint8_t addr[16])
{
	bool any_port = r->port_lo == 0 && r->port_hi == 65535;
	if (r->to.family == 0 && any_port)
		return true;
	if (family != 4 && family != 6)
		return false;
	if (!any_port && (port < r->port_lo || port > r->port_hi))
		return false;
	if (r->to.family == 0)
		return true;
	if (r->to.family != family)
		return false;
	unsigned bits = r->to.prefix, full = bits / 8, rest = bits % 8;
	if (memcmp(r->to.addr, addr, full) != 0)
		return false;
	if (rest == 0)
		return true;
	uint8_t mask = (uint8_t)(0xffu << (8 - rest));
	return (r->to.addr[full] & mask) == (addr[full] & mask);
}

/* True if `name` is one of the '+'-separated names in list. */
static bool name_in(const char *list, const char *name)
{
	size_t n = strlen(name);
	for (const char *s = list; *s != '\0';) {
		const char *e = strchr(s, '+');
		size_t l = e != NULL ? (size_t)(e - s) : strlen(s);
		if (l == n && n > 0 && memcmp(s, name, n) == 0)
			return true;
		s += l + (e != NULL);
	}
	return false;
}

bool sl_policy_selects(const struct sl_policy *p, const char *exe_base, const char *invoked)
{
	if (p->only[0] != '\0' && !name_in(p->only, exe_base) && !name_in(p->only, invoked))
		return false;
	return !(name_in(p->skip, exe_base) || name_in(p->skip, invoked));
}
