/* SPDX-License-Identifier: MIT */
/*
 * match.c - which rules of a policy fit a call.
 */
#include "match.h"

static bool rule_addr(const struct sl_rule *r, const struct sl_addr *a)
{
	static const uint8_t none[16];
	return a != NULL ? sl_rule_fits_addr(r, a->family, a->port, a->addr)
			 : sl_rule_fits_addr(r, 0, 0, none);
}

uint32_t sl_match(const struct sl_policy *p, uint32_t cand, unsigned family, unsigned type,
		  const struct sl_addr *a)
{
	uint32_t m = 0;
	for (uint32_t rest = cand; rest != 0; rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		const struct sl_rule *r = &p->rules[i];
		if (sl_rule_fits_socket(r, family, type) && rule_addr(r, a))
			m |= (uint32_t)1 << i;
	}
	return m;
}

uint32_t sl_match_socket(const struct sl_policy *p, unsigned family, unsigned type)
{
	uint32_t m = 0;
	for (uint32_t i = 0; i < p->n_rules; i++)
		if (sl_rule_fits_socket(&p->rules[i], family, type))
			m |= (uint32_t)1 << i;
	return m;
}

uint32_t sl_match_op(const struct sl_policy *p, enum sl_op op)
{
	uint32_t m = 0;
	for (uint32_t i = 0; i < p->n_rules; i++)
		if (p->rules[i].op == op)
			m |= (uint32_t)1 << i;
	return m;
}

bool sl_match_needs_addr(const struct sl_policy *p, enum sl_op op)
{
	for (uint32_t i = 0; i < p->n_rules; i++) {
		const struct sl_rule *r = &p->rules[i];
		if (r->op == op && (r->to.family != 0 || r->port_lo != 0 || r->port_hi != 65535 ||
				    r->scope == SL_SCOPE_PEER))
			return true;
	}
	return false;
}
