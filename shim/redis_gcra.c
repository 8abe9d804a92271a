/* SPDX-License-Identifier: MIT */
/*
 * redis_gcra.c - the Lua script that runs a redis=KEY rule's authoritative
 * token bucket on the Redis server (GCRA, like core/gcra.c).
 *
 * One call leases up to ARGV[3] units: it takes as many as the bucket holds
 * right now (a partial grant rather than a refusal, so a lease never waits
 * for a full batch) and says how long until one more unit would be there.
 * Time is the server's own (TIME), so clients' clocks may disagree. The
 * state is one key per limiter holding the theoretical arrival time in
 * microseconds (a float with three decimals: Lua numbers are doubles, exact
 * to 0.25 us at today's epoch), which expires once the bucket would be full
 * again (plus 1 s): an idle limiter leaves nothing behind. The key, chosen by
 * the shim, is "sluice:{KEY}": the hash tag keeps it whole on Redis Cluster
 * and the script touches no other key.
 *
 *   KEYS[1]  the limiter's key
 *   ARGV[1]  emission interval T: microseconds per unit (may be fractional)
 *   ARGV[2]  burst tolerance tau: microseconds (T times the burst)
 *   ARGV[3]  units wanted (>= 1)
 *   returns  {granted, wait_us}: 0 <= granted <= wanted units taken; when
 *            fewer were granted, wait_us >= 1 until one more would be.
 *
 * The 1e-9 slack keeps floor() from losing a whole unit to rounding when
 * tau is an exact multiple of T.
 */
#include "redis.h"

const char sl__redis_gcra_lua[] = "local t = redis.call('TIME')\n"
				  "local now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"
				  "local T = tonumber(ARGV[1])\n"
				  "local tau = tonumber(ARGV[2])\n"
				  "local want = tonumber(ARGV[3])\n"
				  "local tat = tonumber(redis.call('GET', KEYS[1])) or now\n"
				  "if tat < now then tat = now end\n"
				  "local avail = math.floor((now + tau - tat) / T + 1e-9)\n"
				  "if avail < 0 then avail = 0 end\n"
				  "local grant = math.min(want, avail)\n"
				  "if grant > 0 then\n"
				  "  tat = tat + grant * T\n"
				  "  redis.call('SET', KEYS[1], string.format('%.3f', tat), 'PX',\n"
				  "             math.ceil((tat - now) / 1000) + 1000)\n"
				  "end\n"
				  "local wait = 0\n"
				  "if grant < want then\n"
				  "  wait = math.ceil(tat + T - tau - now)\n"
				  "  if wait < 1 then wait = 1 end\n"
				  "end\n"
				  "return {grant, wait}\n";
