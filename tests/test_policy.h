/* SPDX-License-Identifier: MIT */
/*
 * test_policy.h - a policy from the text of SLUICE_RULES, for the tests of
 * what decides over rules (engine/, supervise/); a parse error fails the
 * test with its message. Include after test_core.h (cmocka).
 */
#ifndef SLUICE_TEST_POLICY_H
#define SLUICE_TEST_POLICY_H

#include "policy.h"

static inline struct sl_policy policy_of(const char *rules)
{
	struct sl_policy p;
	char err[SL_ERR_MAX];
	sl_policy_init(&p);
	if (sl_policy_parse_var(&p, "SLUICE_RULES", rules, err, sizeof(err)) != 0)
		fail_msg("%s", err);
	return p;
}

#endif /* SLUICE_TEST_POLICY_H */
