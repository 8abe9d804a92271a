/* SPDX-License-Identifier: MIT */
/*
 * test_policy.c - table-driven tests of the SLUICE_* rule language.
 *
 * Two tables, one cmocka test per row:
 *   valid_cases   a variable and value, and the canonical text of the rules
 *                 it gives (";"-joined). Each row also checks the round trip:
 *                 every rule's canonical text, parsed back as SLUICE_RULES,
 *                 gives an equal rule (sl_rule_equal) that prints the same.
 *   error_cases   a variable and value, and the exact one-line message.
 *   redis_cases   SLUICE_REDIS values and their canonical text, password
 *                 masked (the password, "s3cret", must appear nowhere).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "test_assert.h"

#include "policy.h"

struct policy_case {
	const char *var;
	const char *value;
	const char *expected; /* canonical rules, or the error message */
};

static const struct policy_case valid_cases[] = {
	/* Circuit breakers: defaults window=10s, open=5s, per=peer, min=5. */
	{"SLUICE_BREAK", "errors=5,window=1s,open=2s,errno=EHOSTUNREACH",
	 "break:errors=5,window=1s,open=2s,errno=EHOSTUNREACH"},
	{"SLUICE_BREAK", "errors=50%", "break:errors=50%"},
	{"SLUICE_BREAK", " errors = 20% , min = 10 , per=process , slow=250ms , window=10s ",
	 "break:errors=20%,min=10,slow=250ms,per=process"},
	{"SLUICE_RULES", "connect:100/s;break:errors=3,to=127.0.0.1,port=8000-8080,open=1500ms",
	 "connect:100/s;break:errors=3,open=1500ms,to=127.0.0.1,port=8000-8080"},
	{"SLUICE_BREAK", "errors=1,family=unix,per=process,errno=ETIMEDOUT",
	 "break:errors=1,errno=ETIMEDOUT,per=process,family=unix"},
	/* warmup= (Guava's SmoothWarmingUp): cold 3 is the default. */
	{"SLUICE_CONNECT", "100/s,warmup=2s", "connect:100/s,warmup=2s"},
	{"SLUICE_CONNECT", "100/s,cold=3,warmup=2000ms", "connect:100/s,warmup=2s"},
	{"SLUICE_SEND", "1MiB/s,warmup=1.5s,cold=4,burst=64KiB,per=peer",
	 "send:1MiB/s,burst=64KiB,warmup=1500ms,cold=4,per=peer"},
	{"SLUICE_RULES", "recv:10/s,warmup=1h,cold=100,shared=w;accept:5/s,warmup=300ms,cold=2",
	 "recv:10/s,warmup=1h,cold=100,shared=w;accept:5/s,warmup=300ms,cold=2"},
	/* The shortest warm-up of 100/s at cold 3: (1 + 3) / 2 x 10 ms. */
	{"SLUICE_CONNECT", "100/s,warmup=20ms,action=reject",
	 "connect:100/s,warmup=20ms,action=reject"},
	/* redis=KEY: fleet-wide limits, on-error and lease defaults left out. */
	{"SLUICE_CONNECT", "500/s,redis=k", "connect:500/s,redis=k"},
	{"SLUICE_CONNECT", "500/s,lease=5,on-error=local,redis=api:v1.x-y_z",
	 "connect:500/s,redis=api:v1.x-y_z"},
	{"SLUICE_CONNECT", "500/s,redis=k,on-error=closed,lease=50,action=reject",
	 "connect:500/s,action=reject,redis=k,on-error=closed,lease=50"},
	{"SLUICE_SEND", "1MiB/s,redis=up,on-error=open,lease=10486B",
	 "send:1MiB/s,redis=up,on-error=open"},
	{"SLUICE_SEND", "1MiB/s,burst=64KiB,redis=up", "send:1MiB/s,burst=64KiB,redis=up"},
	/* A host pool: shared= with redis=. */
	{"SLUICE_SEND", "10MiB/s,redis=up,shared=up,lease=1MiB",
	 "send:10MiB/s,shared=up,redis=up,lease=1MiB"},
	{"SLUICE_RULES", "recv:10/s,redis=r,lease=4;send:1/s",
	 "recv:10/s,redis=r,lease=4;send:1/s"},
	/* The fixed option order: nonblock and shared before redis. */
	{"SLUICE_SEND", "1MiB/s,lease=64KiB,redis=up,nonblock=sleep,per=process",
	 "send:1MiB/s,nonblock=sleep,redis=up,lease=64KiB"},
	{"SLUICE_SEND", "1MiB/s", "send:1MiB/s"},
	{"SLUICE_SEND", "10MiB/s", "send:10MiB/s"},
	{"SLUICE_SEND", "2.5MB/s", "send:2500KB/s"},
	{"SLUICE_SEND", "100/s", "send:100/s"},
	{"SLUICE_SEND", "1/h", "send:1/h"},
	{"SLUICE_SEND", "3/7s", "send:3/7s"},
	{"SLUICE_SEND", "600/min", "send:600/min"},
	{"SLUICE_SEND", "5/100ms", "send:5/100ms"},
	{"SLUICE_SEND", "1.5KiB/s", "send:1536B/s"},
	{"SLUICE_SEND", "1000KB/s", "send:1MB/s"},
	{"SLUICE_SEND", "1024KiB/s", "send:1MiB/s"},
	{"SLUICE_SEND", "0.5GiB/s", "send:512MiB/s"},
	{"SLUICE_SEND", "1GB/s", "send:1GB/s"},
	{"SLUICE_SEND", "1000000B/s", "send:1MB/s"},
	{"SLUICE_SEND", "1048576B/s", "send:1MiB/s"},
	{"SLUICE_SEND", "1024000B/s", "send:1000KiB/s"},
	{"SLUICE_SEND", "1/1.5s", "send:1/1500ms"},
	{"SLUICE_SEND", "1/90s", "send:1/90s"},
	{"SLUICE_SEND", "1/120s", "send:1/2min"},
	{"SLUICE_SEND", "60/60min", "send:60/h"},
	{"SLUICE_SEND", "1/0.5us", "send:1/0.5us"},
	{"SLUICE_SEND", "1/1000us", "send:1/ms"},
	{"SLUICE_SEND", "7/24h", "send:7/24h"},
	{"SLUICE_SEND", "1/1.25ms", "send:1/1250us"},
	{"SLUICE_SEND", "007/s", "send:7/s"},
	{"SLUICE_SEND", "2.50MB/s", "send:2500KB/s"},
	{"SLUICE_SEND", "1MiB/s,burst=64KiB", "send:1MiB/s,burst=64KiB"},
	{"SLUICE_SEND", "1MiB/s,burst=1MB", "send:1MiB/s,burst=1MB"},
	{"SLUICE_SEND", "10MiB/s,burst=52429B", "send:10MiB/s"},
	{"SLUICE_SEND", "1GiB/s,burst=107375B", "send:1GiB/s,burst=107375B"},
	{"SLUICE_SEND", "100/s,burst=10", "send:100/s,burst=10"},
	{"SLUICE_SEND", "1/h,burst=3", "send:1/h,burst=3"},
	{"SLUICE_SEND", "100/s,algo=leaky", "send:100/s,algo=leaky"},
	{"SLUICE_SEND", "100/s,algo=fixed", "send:100/s,algo=fixed"},
	{"SLUICE_SEND", "100/s,algo=sliding", "send:100/s,algo=sliding"},
	{"SLUICE_SEND", "100/s,algo=token", "send:100/s"},
	{"SLUICE_SEND", "100/s,action=reject", "send:100/s,action=reject"},
	{"SLUICE_SEND", "100/s,action=dry-run", "send:100/s,action=dry-run"},
	{"SLUICE_SEND", "100/s,action=delay", "send:100/s"},
	{"SLUICE_SEND", "100/s,max-delay=250ms", "send:100/s,max-delay=250ms"},
	{"SLUICE_SEND", "100/s,max-delay=1.5s", "send:100/s,max-delay=1500ms"},
	{"SLUICE_SEND", "100/s,max-delay=2min", "send:100/s,max-delay=2min"},
	{"SLUICE_SEND", "100/s,max-delay=0.5us", "send:100/s,max-delay=0.5us"},
	{"SLUICE_SEND", "100/s,max-delay=250ms,action=delay", "send:100/s,max-delay=250ms"},
	{"SLUICE_SEND", "100/s,errno=ETIMEDOUT", "send:100/s,errno=ETIMEDOUT"},
	{"SLUICE_SEND", "100/s,errno=EWOULDBLOCK", "send:100/s,errno=EAGAIN"},
	{"SLUICE_SEND", "100/s,action=reject,errno=ECONNRESET",
	 "send:100/s,action=reject,errno=ECONNRESET"},
	{"SLUICE_SEND", "100/s,per=thread", "send:100/s,per=thread"},
	{"SLUICE_SEND", "10MiB/s,shared=x", "send:10MiB/s,shared=x"},
	{"SLUICE_SEND", "10MiB/s,shared=web-1.pool_A,per=process",
	 "send:10MiB/s,shared=web-1.pool_A"},
	{"SLUICE_CONNS", "8,shared=z", "conns:8,shared=z"},
	{"SLUICE_CONNECT", "200/s,algo=sliding,shared=y,action=reject",
	 "connect:200/s,algo=sliding,action=reject,shared=y"},
	{"SLUICE_RULES", "send:1MiB/s,shared=a;send:1MiB/s,shared=b",
	 "send:1MiB/s,shared=a;send:1MiB/s,shared=b"},
	{"SLUICE_SEND", "1MiB/s,shared=a,nonblock=sleep", "send:1MiB/s,nonblock=sleep,shared=a"},
	{"SLUICE_SEND", "100/s,per=fd", "send:100/s,per=fd"},
	{"SLUICE_SEND", "100/s,per=peer", "send:100/s,per=peer"},
	{"SLUICE_SEND", "100/s,per=process", "send:100/s"},
	{"SLUICE_SEND", "1MiB/s,to=10.0.0.0/8:443", "send:1MiB/s,to=10.0.0.0/8,port=443"},
	{"SLUICE_SEND", "1MiB/s,to=[::1]:8080", "send:1MiB/s,to=::1,port=8080"},
	{"SLUICE_SEND", "1MiB/s,to=127.0.0.1", "send:1MiB/s,to=127.0.0.1"},
	{"SLUICE_SEND", "1MiB/s,to=127.0.0.1/32", "send:1MiB/s,to=127.0.0.1"},
	{"SLUICE_SEND", "1MiB/s,to=::1", "send:1MiB/s,to=::1"},
	{"SLUICE_SEND", "1MiB/s,to=[::1]", "send:1MiB/s,to=::1"},
	{"SLUICE_SEND", "1MiB/s,to=[fe80::]/10:443", "send:1MiB/s,to=fe80::/10,port=443"},
	{"SLUICE_SEND", "1MiB/s,to=[fe80::/10]:443", "send:1MiB/s,to=fe80::/10,port=443"},
	{"SLUICE_SEND", "1MiB/s,to=2001:DB8::/32", "send:1MiB/s,to=2001:db8::/32"},
	{"SLUICE_SEND", "1MiB/s,to=0.0.0.0/0", "send:1MiB/s,to=0.0.0.0/0"},
	{"SLUICE_SEND", "1MiB/s,to=::/0", "send:1MiB/s,to=::/0"},
	/* IPv4-mapped networks are the IPv4 ones (addresses are matched so). */
	{"SLUICE_SEND", "1MiB/s,to=::ffff:10.0.0.1", "send:1MiB/s,to=10.0.0.1"},
	{"SLUICE_SEND", "1MiB/s,to=[::ffff:10.0.0.0/104]:53", "send:1MiB/s,to=10.0.0.0/8,port=53"},
	{"SLUICE_SEND", "1MiB/s,to=::ffff:0:0/96", "send:1MiB/s,to=0.0.0.0/0"},
	/* IPv4 to= on inet6 sockets: the mapped addresses. */
	{"SLUICE_SEND", "1MiB/s,family=inet6,to=127.0.0.0/8",
	 "send:1MiB/s,to=127.0.0.0/8,family=inet6"},
	{"SLUICE_SEND", "1MiB/s,to=::fffe:0:0/95",
	 "send:1MiB/s,to=::fffe:0:0/95"}, /* wider: IPv6 */
	{"SLUICE_SEND", "1MiB/s,to=2001:db8:0:0:1:0:0:1", "send:1MiB/s,to=2001:db8::1:0:0:1"},
	{"SLUICE_SEND", "1MiB/s,to=1:0:0:2:0:0:0:3", "send:1MiB/s,to=1:0:0:2::3"},
	{"SLUICE_SEND", "1MiB/s,to=1:2:3:4:5:6:7:8", "send:1MiB/s,to=1:2:3:4:5:6:7:8"},
	{"SLUICE_SEND", "1MiB/s,to=192.168.1.0/24,port=53",
	 "send:1MiB/s,to=192.168.1.0/24,port=53"},
	{"SLUICE_SEND", "1MiB/s,port=80", "send:1MiB/s,port=80"},
	{"SLUICE_SEND", "1MiB/s,port=8000-8080", "send:1MiB/s,port=8000-8080"},
	{"SLUICE_SEND", "1MiB/s,port=1-65535", "send:1MiB/s,port=1-65535"},
	{"SLUICE_SEND", "1MiB/s,port=443-443", "send:1MiB/s,port=443"},
	{"SLUICE_SEND", "1MiB/s,family=inet", "send:1MiB/s,family=inet"},
	{"SLUICE_SEND", "1MiB/s,family=inet6+inet", "send:1MiB/s"},
	{"SLUICE_SEND", "1MiB/s,family=unix", "send:1MiB/s,family=unix"},
	{"SLUICE_SEND", "1MiB/s,family=unix+inet", "send:1MiB/s,family=inet+unix"},
	{"SLUICE_SEND", "1MiB/s,type=dgram", "send:1MiB/s,type=dgram"},
	{"SLUICE_SEND", "1MiB/s,type=stream", "send:1MiB/s,type=stream"},
	{"SLUICE_SEND", "1MiB/s,type=dgram+stream", "send:1MiB/s"},
	{"SLUICE_SEND",
	 "100/s,type=stream,family=inet6,port=53,to=::1,per=peer,errno=EPIPE,max-delay=1s,action=delay,algo=leaky",
	 "send:100/s,algo=leaky,max-delay=1s,errno=EPIPE,per=peer,to=::1,port=53,family=inet6,type=stream"},
	{"SLUICE_SEND", " 1MiB/s , burst = 64KiB , per=fd ", "send:1MiB/s,burst=64KiB,per=fd"},
	{"SLUICE_RECV", "10MiB/s", "recv:10MiB/s"},
	{"SLUICE_RECV", "5/100ms,algo=sliding", "recv:5/100ms,algo=sliding"},
	{"SLUICE_RECV", "100/s,action=dry-run,per=thread", "recv:100/s,action=dry-run,per=thread"},
	{"SLUICE_CONNECT", "10/s", "connect:10/s"},
	{"SLUICE_SEND", "1MiB/s,nonblock=eagain", "send:1MiB/s"},
	{"SLUICE_SEND", "1MiB/s,nonblock=sleep,per=fd", "send:1MiB/s,per=fd,nonblock=sleep"},
	{"SLUICE_ACCEPT", "10/s,nonblock=sleep,max-delay=2s",
	 "accept:10/s,max-delay=2s,nonblock=sleep"},
	{"SLUICE_CONNECT", "10/s,type=stream+dgram", "connect:10/s,type=stream+dgram"},
	{"SLUICE_CONNECT", "10/s,type=dgram", "connect:10/s,type=dgram"},
	{"SLUICE_CONNECT", "10/s,per=peer,action=reject", "connect:10/s,action=reject,per=peer"},
	{"SLUICE_CONNECT", "1/h,algo=fixed", "connect:1/h,algo=fixed"},
	{"SLUICE_CONNECT", "10/s,to=10.0.0.0/8:443,errno=ECONNREFUSED",
	 "connect:10/s,errno=ECONNREFUSED,to=10.0.0.0/8,port=443"},
	{"SLUICE_ACCEPT", "50/s", "accept:50/s"},
	{"SLUICE_ACCEPT", "50/s,per=fd", "accept:50/s,per=fd"},
	{"SLUICE_ACCEPT", "50/s,action=reject,errno=ECONNABORTED",
	 "accept:50/s,action=reject,errno=ECONNABORTED"},
	{"SLUICE_ACCEPT", "50/s,to=10.1.2.3", "accept:50/s,to=10.1.2.3"},
	{"SLUICE_CONNS", "100", "conns:100"},
	{"SLUICE_CONNS", "1", "conns:1"},
	{"SLUICE_CONNS", "100,action=reject", "conns:100,action=reject"},
	{"SLUICE_CONNS", "100,max-delay=1s", "conns:100,max-delay=1s"},
	{"SLUICE_CONNS", "100,per=peer", "conns:100,per=peer"},
	{"SLUICE_CONNS", "100,per=thread", "conns:100,per=thread"},
	{"SLUICE_CONNS", "100,to=10.0.0.0/8", "conns:100,to=10.0.0.0/8"},
	{"SLUICE_CONNS", "100,errno=ETIMEDOUT", "conns:100,errno=ETIMEDOUT"},
	{"SLUICE_CONNS", "100,action=dry-run", "conns:100,action=dry-run"},
	{"SLUICE_CONNS", "100,family=inet", "conns:100,family=inet"},
	{"SLUICE_RULES", "send:1MiB/s", "send:1MiB/s"},
	{"SLUICE_RULES", "send:1MiB/s;recv:2MiB/s", "send:1MiB/s;recv:2MiB/s"},
	{"SLUICE_RULES", "send:1MiB/s,burst=64KiB;connect:10/s,to=10.0.0.0/8:443;conns:5",
	 "send:1MiB/s,burst=64KiB;connect:10/s,to=10.0.0.0/8,port=443;conns:5"},
	{"SLUICE_RULES", " send : 1MiB/s ; connect:10/s ", "send:1MiB/s;connect:10/s"},
	{"SLUICE_RULES", "accept:1/s;accept:2/s", "accept:1/s;accept:2/s"},
	{"SLUICE_RULES", "recv:1GiB/s,algo=sliding,action=reject,errno=EAGAIN",
	 "recv:1GiB/s,algo=sliding,action=reject,errno=EAGAIN"},
	{"SLUICE_SEND", "1MiB/s,to=::1/128:8080", "send:1MiB/s,to=::1,port=8080"},
	{"SLUICE_SEND", "1MiB/s,to=fe80::/10:443", "send:1MiB/s,to=fe80::/10,port=443"},
	{"SLUICE_SEND", "1/s,to=[::ffff:127.0.0.1]:80", "send:1/s,to=127.0.0.1,port=80"},
	{"SLUICE_CONNECT", "1/2s,max-delay=100ms,algo=leaky",
	 "connect:1/2s,algo=leaky,max-delay=100ms"},
};

static const struct policy_case error_cases[] = {
	{"SLUICE_BREAK", "window=1s",
	 "SLUICE_BREAK=\"window=1s\": at column 1: missing errors=N or errors=P% (how many failed connects open the breaker, e.g. errors=5)"},
	{"SLUICE_BREAK", "",
	 "SLUICE_BREAK=\"\": at column 1: empty breaker (expected errors=N or errors=P%, e.g. errors=5,window=10s,open=5s)"},
	{"SLUICE_BREAK", "errors=0",
	 "SLUICE_BREAK=\"errors=0\": at column 8: errors '0' must be a whole number from 1 to 1048575"},
	{"SLUICE_BREAK", "errors=101%",
	 "SLUICE_BREAK=\"errors=101%\": at column 8: errors percentage '101' must be a whole number from 1 to 100"},
	{"SLUICE_BREAK", "errors=5,min=3",
	 "SLUICE_BREAK=\"errors=5,min=3\": at column 10: option 'min' is valid only with errors=P% (the fewest connects a ratio is judged on)"},
	{"SLUICE_BREAK", "errors=5,window=5ms",
	 "SLUICE_BREAK=\"errors=5,window=5ms\": at column 17: window '5ms' must be from 10ms to 1h"},
	{"SLUICE_BREAK", "errors=5,open=2h",
	 "SLUICE_BREAK=\"errors=5,open=2h\": at column 15: open '2h' must be from 1ms to 1h"},
	{"SLUICE_BREAK", "errors=5,per=thread",
	 "SLUICE_BREAK=\"errors=5,per=thread\": at column 14: unknown per (for break) 'thread' (expected process, peer)"},
	{"SLUICE_BREAK", "errors=5,errno=EFOO",
	 "SLUICE_BREAK=\"errors=5,errno=EFOO\": at column 16: unknown errno name 'EFOO' (expected a name such as ECONNREFUSED, EHOSTUNREACH, ETIMEDOUT)"},
	{"SLUICE_BREAK", "errors=5,eror=1",
	 "SLUICE_BREAK=\"errors=5,eror=1\": at column 10: unknown breaker option 'eror' (did you mean errors?)"},
	{"SLUICE_BREAK", "errors=5,errors=6",
	 "SLUICE_BREAK=\"errors=5,errors=6\": at column 10: duplicate option 'errors' (first given at column 1)"},
	{"SLUICE_BREAK", "errors=5,family=unix",
	 "SLUICE_BREAK=\"errors=5,family=unix\": at column 17: family=unix needs per=process (a unix socket's peer has no address and port to keep a breaker for)"},
	{"SLUICE_BREAK", "errors=5,to=10.0.0.1:80,port=81",
	 "SLUICE_BREAK=\"errors=5,to=10.0.0.1:80,port=81\": at column 25: duplicate option 'port' (to= gives port 80 too)"},
	{"SLUICE_RULES", "break",
	 "SLUICE_RULES=\"break\": at column 6: expected ':' and a breaker after 'break' (e.g. break:errors=5)"},
	{"SLUICE_CONNECT", "100/s,warmup=0s",
	 "SLUICE_CONNECT=\"100/s,warmup=0s\": at column 14: warmup=0s is no warm-up: leave the option out"},
	{"SLUICE_CONNECT", "100/s,warmup=2",
	 "SLUICE_CONNECT=\"100/s,warmup=2\": at column 15: missing unit after '2' (expected us, ms, s, min, h)"},
	{"SLUICE_CONNECT", "100/s,warmup=19ms",
	 "SLUICE_CONNECT=\"100/s,warmup=19ms\": at column 14: warmup '19ms' is too short for the rate: at least 20ms ((1 + cold) / 2 stable intervals) lets the rate climb"},
	{"SLUICE_CONNECT", "100/s,warmup=30ms,cold=9",
	 "SLUICE_CONNECT=\"100/s,warmup=30ms,cold=9\": at column 14: warmup '30ms' is too short for the rate: at least 50ms ((1 + cold) / 2 stable intervals) lets the rate climb"},
	{"SLUICE_CONNECT", "100/s,warmup=61min",
	 "SLUICE_CONNECT=\"100/s,warmup=61min\": at column 14: warmup '61min' is longer than 1h"},
	{"SLUICE_CONNECT", "100/s,cold=3",
	 "SLUICE_CONNECT=\"100/s,cold=3\": at column 7: option 'cold' is valid only with warmup="},
	{"SLUICE_CONNECT", "100/s,warmup=2s,cold=1",
	 "SLUICE_CONNECT=\"100/s,warmup=2s,cold=1\": at column 22: cold '1' must be a whole number from 2 to 100 (the coldest interval is cold x the stable one)"},
	{"SLUICE_CONNECT", "100/s,warmup=2s,cold=2.5",
	 "SLUICE_CONNECT=\"100/s,warmup=2s,cold=2.5\": at column 22: cold '2.5' must be a whole number from 2 to 100 (the coldest interval is cold x the stable one)"},
	{"SLUICE_CONNECT", "100/s,warmup=2s,cold=101",
	 "SLUICE_CONNECT=\"100/s,warmup=2s,cold=101\": at column 22: cold '101' must be a whole number from 2 to 100 (the coldest interval is cold x the stable one)"},
	{"SLUICE_CONNECT", "100/s,warmup=2s,algo=leaky",
	 "SLUICE_CONNECT=\"100/s,warmup=2s,algo=leaky\": at column 7: option 'warmup' is valid only with algo=token (the warm-up spends stored permits, as Guava's SmoothWarmingUp does)"},
	{"SLUICE_CONNS", "10,warmup=2s",
	 "SLUICE_CONNS=\"10,warmup=2s\": at column 4: option 'warmup' is not valid for conns (a count has no rate to warm up)"},
	{"SLUICE_CONNECT", "100/s,warmup=2s,redis=k",
	 "SLUICE_CONNECT=\"100/s,warmup=2s,redis=k\": at column 7: option 'warmup' cannot be combined with redis= (the Redis script is a plain GCRA token bucket)"},
	{"SLUICE_CONNECT", "100/s,warmup=2s,warmup=3s",
	 "SLUICE_CONNECT=\"100/s,warmup=2s,warmup=3s\": at column 17: duplicate option 'warmup' (first given at column 7)"},
	{"SLUICE_SEND", "1MiB/s,shared=a/b",
	 "SLUICE_SEND=\"1MiB/s,shared=a/b\": at column 16: invalid character '/' in shared name (expected letters, digits, '.', '_' or '-')"},
	{"SLUICE_SEND", "1MiB/s,shared=..",
	 "SLUICE_SEND=\"1MiB/s,shared=..\": at column 15: shared name '..' is not a valid name"},
	{"SLUICE_SEND", "1MiB/s,shared=abcdefghijklmnopqrstuvwxyz0123456",
	 "SLUICE_SEND=\"1MiB/s,shared=abcdefghijklmnopqrstuvwxyz0123456\": at column 15: shared name 'abcdefghijklmnopqrstuvwxyz0123456' is longer than 31 characters"},
	{"SLUICE_SEND", "1MiB/s,per=thread,shared=x",
	 "SLUICE_SEND=\"1MiB/s,per=thread,shared=x\": at column 19: shared= is valid only with per=process (one limiter serves every process)"},
	{"SLUICE_SEND", "1MiB/s,shared=x,shared=y",
	 "SLUICE_SEND=\"1MiB/s,shared=x,shared=y\": at column 17: duplicate option 'shared' (first given at column 8)"},
	/* redis=KEY and SLUICE_REDIS; a password is never shown. */
	{"SLUICE_CONNECT", "500/s,on-error=open",
	 "SLUICE_CONNECT=\"500/s,on-error=open\": at column 7: option 'on-error' is valid only with redis=KEY"},
	{"SLUICE_CONNECT", "500/s,lease=5",
	 "SLUICE_CONNECT=\"500/s,lease=5\": at column 7: option 'lease' is valid only with redis=KEY"},
	{"SLUICE_CONNECT", "500/s,redis=a{b}",
	 "SLUICE_CONNECT=\"500/s,redis=a{b}\": at column 14: unexpected '{' in the redis key (expected letters, digits, '_', '.', ':' or '-')"},
	{"SLUICE_CONNECT", "500/s,redis=",
	 "SLUICE_CONNECT=\"500/s,redis=\": at column 13: missing value after 'redis='"},
	{"SLUICE_CONNECT", "500/s,redis=k123456789k123456789k123456789k123456789k123456789",
	 "SLUICE_CONNECT=\"500/s,redis=k123456789k123456789k123456789k123456789k123456789\": at column 13: redis key 'k123456789k123456789k123456789k123456789' is 50 bytes long (at most 47)"},
	{"SLUICE_CONNECT", "500/s,redis=k,algo=leaky",
	 "SLUICE_CONNECT=\"500/s,redis=k,algo=leaky\": at column 7: option 'redis' is valid only with algo=token (the Redis script is a GCRA token bucket)"},
	{"SLUICE_CONNECT", "500/s,redis=k,per=thread",
	 "SLUICE_CONNECT=\"500/s,redis=k,per=thread\": at column 7: option 'redis' is valid only with per=process (each process leases from the one fleet-wide bucket)"},
	{"SLUICE_CONNS", "10,redis=k",
	 "SLUICE_CONNS=\"10,redis=k\": at column 4: option 'redis' is not valid for conns (open connections are counted on one machine)"},
	{"SLUICE_CONNECT", "500/s,redis=k,lease=2",
	 "SLUICE_CONNECT=\"500/s,redis=k,lease=2\": at column 21: lease '2' is smaller than the burst (3): one burst must fit in one lease"},
	{"SLUICE_SEND", "1MiB/s,redis=k,lease=100",
	 "SLUICE_SEND=\"1MiB/s,redis=k,lease=100\": at column 22: lease must be in bytes like the rate (e.g. lease=64KiB)"},
	{"SLUICE_CONNECT", "500/s,redis=k,on-error=fail",
	 "SLUICE_CONNECT=\"500/s,redis=k,on-error=fail\": at column 24: unknown on-error 'fail' (expected local, open, closed)"},
	{"SLUICE_REDIS", "http://127.0.0.1:6379",
	 "SLUICE_REDIS=\"http://127.0.0.1:6379\": at column 1: expected redis://[USER:PASSWORD@]HOST[:PORT][/DB], unix:///PATH, redis+cluster://NODE,NODE,... or redis+sentinel://NODE,NODE,.../MASTER"},
	{"SLUICE_REDIS", "redis://user:s3cret@",
	 "SLUICE_REDIS=\"redis://user:******@\": at column 21: missing host (e.g. redis://127.0.0.1:6379)"},
	{"SLUICE_REDIS", "redis://user:s3cret@host:99999",
	 "SLUICE_REDIS=\"redis://user:******@host:99999\": at column 26: port '99999' is out of range (at most 65535)"},
	{"SLUICE_REDIS", "redis://s3cret@host",
	 "SLUICE_REDIS=\"redis://******@host\": at column 9: expected USER:PASSWORD@ or :PASSWORD@ before the host"},
	{"SLUICE_REDIS", "redis://user:@host",
	 "SLUICE_REDIS=\"redis://user:@host\": at column 13: empty password after ':' (leave out USER:PASSWORD@ for no AUTH)"},
	{"SLUICE_REDIS", "redis://host:6379/x",
	 "SLUICE_REDIS=\"redis://host:6379/x\": at column 19: unexpected 'x' in the database number (expected digits)"},
	{"SLUICE_REDIS", "redis://[::1:6379",
	 "SLUICE_REDIS=\"redis://[::1:6379\": at column 9: missing ']' after the IPv6 address"},
	{"SLUICE_REDIS", "redis://h1:7000,h2:7001",
	 "SLUICE_REDIS=\"redis://h1:7000,h2:7001\": at column 16: a list of nodes needs redis+cluster:// or redis+sentinel://.../MASTER (redis:// names one server)"},
	{"SLUICE_REDIS", "redis+cluster://h1:7000/0",
	 "SLUICE_REDIS=\"redis+cluster://h1:7000/0\": at column 24: unexpected '/0' after the nodes (a cluster serves database 0 only: no /DB)"},
	{"SLUICE_REDIS", "redis+cluster://h1:7000,,h2",
	 "SLUICE_REDIS=\"redis+cluster://h1:7000,,h2\": at column 25: missing host (e.g. redis://127.0.0.1:6379)"},
	{"SLUICE_REDIS", "redis+cluster://h1:7000,h1:7000",
	 "SLUICE_REDIS=\"redis+cluster://h1:7000,h1:7000\": at column 31: node h1:7000 is given twice"},
	{"SLUICE_REDIS", "redis+cluster://a,b,c,d,e,f,g,h,i",
	 "SLUICE_REDIS=\"redis+cluster://a,b,c,d,e,f,g,h,i\": at column 33: more than 8 nodes (give a few: the others are found from them)"},
	{"SLUICE_REDIS", "redis+cluster://h1:x7",
	 "SLUICE_REDIS=\"redis+cluster://h1:x7\": at column 20: unexpected 'x' in the port (expected digits)"},
	{"SLUICE_REDIS", "redis+sentinel://:pw@s1,s2",
	 "SLUICE_REDIS=\"redis+sentinel://:**@s1,s2\": at column 27: missing /MASTER after the sentinels (the name they monitor, e.g. redis+sentinel://10.0.0.1:26379/mymaster)"},
	{"SLUICE_REDIS", "redis+sentinel://s1//3",
	 "SLUICE_REDIS=\"redis+sentinel://s1//3\": at column 21: missing master name after '/'"},
	{"SLUICE_REDIS", "redis+sentinel://s1/my master",
	 "SLUICE_REDIS=\"redis+sentinel://s1/my master\": at column 23: unexpected ' ' in the master name (expected letters, digits, '_', '-' or '.')"},
	{"SLUICE_REDIS", "redis+sentinel://s1/m/db",
	 "SLUICE_REDIS=\"redis+sentinel://s1/m/db\": at column 23: unexpected 'd' in the database number (expected digits)"},
	{"SLUICE_REDIS", "redis+sentinel://s1:0/m",
	 "SLUICE_REDIS=\"redis+sentinel://s1:0/m\": at column 21: port 0 cannot be connected to"},
	{"SLUICE_REDIS", "redis+cluster://[a/b]:1",
	 "SLUICE_REDIS=\"redis+cluster://[a/b]:1\": at column 19: unexpected '/' in the IPv6 address (expected letters, digits, '.', '-', '_', ':' or '%')"},
	{"SLUICE_REDIS", "redis://h st:1",
	 "SLUICE_REDIS=\"redis://h st:1\": at column 10: unexpected ' ' in the host (expected letters, digits, '.', '-', '_')"},
	{"SLUICE_REDIS", "redis+cluster://[host]:7000",
	 "SLUICE_REDIS=\"redis+cluster://[host]:7000\": at column 18: '[host]' is not an IPv6 address (no ':'; leave out the [])"},
	{"SLUICE_REDIS", "unix://tmp/redis.sock",
	 "SLUICE_REDIS=\"unix://tmp/redis.sock\": at column 8: expected an absolute socket path (unix:///path/to/socket)"},
	{"SLUICE_SEND", "1Mib/s",
	 "SLUICE_SEND=\"1Mib/s\": at column 2: unknown unit 'Mib' (expected B, KB, KiB, MB, MiB, GB, GiB)"},
	{"SLUICE_SEND", "1TB/s",
	 "SLUICE_SEND=\"1TB/s\": at column 2: unknown unit 'TB' (expected B, KB, KiB, MB, MiB, GB, GiB)"},
	{"SLUICE_SEND", "",
	 "SLUICE_SEND=\"\": at column 1: empty rule (expected a rate such as 100/s or 1MiB/s)"},
	{"SLUICE_SEND", "   ",
	 "SLUICE_SEND=\"   \": at column 4: empty rule (expected a rate such as 100/s or 1MiB/s)"},
	{"SLUICE_SEND", "-5/s",
	 "SLUICE_SEND=\"-5/s\": at column 1: negative number '-5' (only positive numbers are allowed)"},
	{"SLUICE_SEND", "+5/s",
	 "SLUICE_SEND=\"+5/s\": at column 1: expected a number, found '+5/s'"},
	{"SLUICE_SEND", ".5/s",
	 "SLUICE_SEND=\".5/s\": at column 1: expected a digit before '.' (write 0.5, not .5)"},
	{"SLUICE_SEND", "5./s", "SLUICE_SEND=\"5./s\": at column 3: expected a digit after '.'"},
	{"SLUICE_SEND", "5",
	 "SLUICE_SEND=\"5\": at column 2: expected '/' and a period after '5' (e.g. 5/s)"},
	{"SLUICE_SEND", "5MiB",
	 "SLUICE_SEND=\"5MiB\": at column 5: expected '/' and a period after '5MiB' (e.g. 5MiB/s)"},
	{"SLUICE_SEND", "5/",
	 "SLUICE_SEND=\"5/\": at column 3: expected a period unit (us, ms, s, min, h)"},
	{"SLUICE_SEND", "5/7",
	 "SLUICE_SEND=\"5/7\": at column 4: missing unit after '7' (expected us, ms, s, min, h)"},
	{"SLUICE_SEND", "5/sec",
	 "SLUICE_SEND=\"5/sec\": at column 3: unknown period 'sec' (expected us, ms, s, min, h)"},
	{"SLUICE_SEND", "5/S",
	 "SLUICE_SEND=\"5/S\": at column 3: unknown period 'S' (expected us, ms, s, min, h)"},
	{"SLUICE_SEND", "5/-1s",
	 "SLUICE_SEND=\"5/-1s\": at column 3: negative number '-1' (only positive numbers are allowed)"},
	{"SLUICE_SEND", "5/s x",
	 "SLUICE_SEND=\"5/s x\": at column 4: unexpected ' x' after the rate (options follow a comma, e.g. 100/s,burst=10)"},
	{"SLUICE_SEND", "5/s;recv:1/s",
	 "SLUICE_SEND=\"5/s;recv:1/s\": at column 4: unexpected ';': a variable holds one rule (use SLUICE_RULES=\"OP:SPEC;OP:SPEC\" for several)"},
	{"SLUICE_SEND", "5-s",
	 "SLUICE_SEND=\"5-s\": at column 2: unexpected '-s' after the amount (expected '/' and a period, e.g. 100/s)"},
	{"SLUICE_SEND", "0/s",
	 "SLUICE_SEND=\"0/s\": at column 1: zero rate '0/s': nothing could ever pass"},
	{"SLUICE_SEND", "0MiB/s",
	 "SLUICE_SEND=\"0MiB/s\": at column 1: zero rate '0MiB/s': nothing could ever pass"},
	{"SLUICE_SEND", "5/0s", "SLUICE_SEND=\"5/0s\": at column 3: zero period '0s'"},
	{"SLUICE_SEND", "5/0.0s", "SLUICE_SEND=\"5/0.0s\": at column 3: zero period '0.0s'"},
	{"SLUICE_SEND", "1.5B/s",
	 "SLUICE_SEND=\"1.5B/s\": at column 1: '1.5B' is not a whole number of bytes"},
	{"SLUICE_SEND", "2.5/s",
	 "SLUICE_SEND=\"2.5/s\": at column 1: '2.5' is not a whole number of calls"},
	{"SLUICE_SEND", "1/0.0001us",
	 "SLUICE_SEND=\"1/0.0001us\": at column 3: '0.0001us' is not a whole number of nanoseconds"},
	{"SLUICE_SEND", "1.2.3/s",
	 "SLUICE_SEND=\"1.2.3/s\": at column 4: unexpected second '.' in '1.2.3'"},
	{"SLUICE_SEND", "99999999999999999999/s",
	 "SLUICE_SEND=\"99999999999999999999/s\": at column 1: number '99999999999999999999' is too large"},
	{"SLUICE_SEND", "20000000000GiB/s",
	 "SLUICE_SEND=\"20000000000GiB/s\": at column 1: '20000000000GiB' is too large (more than 2^64 bytes)"},
	{"SLUICE_SEND", "1/6000000h",
	 "SLUICE_SEND=\"1/6000000h\": at column 3: '6000000h' is too large (more than 2^64 nanoseconds)"},
	{"SLUICE_SEND", "1/0.00000000000000000001s",
	 "SLUICE_SEND=\"1/0.00000000000000000001s\": at column 3: number '0.00000000000000000001' has too many decimal places"},
	{"SLUICE_SEND", "18446744073709551615/1us,algo=fixed",
	 "SLUICE_SEND=\"18446744073709551615/1us,algo=fixed\": at column 1: rate '18446744073709551615/1us' is out of the range the limiter can represent"},
	{"SLUICE_SEND", "100/s,",
	 "SLUICE_SEND=\"100/s,\": at column 7: empty option (expected name=value after ',')"},
	{"SLUICE_SEND", "100/s,,burst=3",
	 "SLUICE_SEND=\"100/s,,burst=3\": at column 7: empty option (expected name=value after ',')"},
	{"SLUICE_SEND", ",burst=3",
	 "SLUICE_SEND=\",burst=3\": at column 1: expected a rate before the first ','"},
	{"SLUICE_SEND", "100/s,brust=4",
	 "SLUICE_SEND=\"100/s,brust=4\": at column 7: unknown option 'brust' (did you mean burst?)"},
	{"SLUICE_SEND", "100/s,colour=red",
	 "SLUICE_SEND=\"100/s,colour=red\": at column 7: unknown option 'colour' (expected burst, algo, action, max-delay, errno, per, to, port, family, type, nonblock, shared, redis, on-error, lease, warmup, cold, min, max, initial, load1, cpu, rt)"},
	{"SLUICE_SEND", "100/s,burst",
	 "SLUICE_SEND=\"100/s,burst\": at column 12: expected '=' and a value after 'burst'"},
	{"SLUICE_SEND", "100/s,burst=",
	 "SLUICE_SEND=\"100/s,burst=\": at column 13: missing value after 'burst='"},
	{"SLUICE_SEND", "100/s,burst=3,burst=4",
	 "SLUICE_SEND=\"100/s,burst=3,burst=4\": at column 15: duplicate option 'burst' (first given at column 7)"},
	{"SLUICE_SEND", "100/s,per=fd,per=thread",
	 "SLUICE_SEND=\"100/s,per=fd,per=thread\": at column 14: duplicate option 'per' (first given at column 7)"},
	{"SLUICE_SEND", "100/s,burst=0",
	 "SLUICE_SEND=\"100/s,burst=0\": at column 13: burst=0 admits nothing: the smallest meaningful burst for 100/s is 1"},
	{"SLUICE_SEND", "1GiB/s,burst=0B",
	 "SLUICE_SEND=\"1GiB/s,burst=0B\": at column 14: burst=0 admits nothing: the smallest meaningful burst for 1GiB/s is 107375B"},
	{"SLUICE_SEND", "1GiB/s,burst=10B",
	 "SLUICE_SEND=\"1GiB/s,burst=10B\": at column 14: burst '10B' is too small for 1GiB/s: the smallest meaningful burst is 107375B (100 us of the rate)"},
	{"SLUICE_SEND", "100/s,burst=10KiB",
	 "SLUICE_SEND=\"100/s,burst=10KiB\": at column 13: burst must be a number of calls like the rate (no unit)"},
	{"SLUICE_SEND", "1MiB/s,burst=10",
	 "SLUICE_SEND=\"1MiB/s,burst=10\": at column 14: burst must be in bytes like the rate (e.g. burst=64KiB)"},
	{"SLUICE_SEND", "1MiB/s,burst=1.5B",
	 "SLUICE_SEND=\"1MiB/s,burst=1.5B\": at column 14: '1.5B' is not a whole number of bytes"},
	{"SLUICE_SEND", "1MiB/s,burst=64KiBx",
	 "SLUICE_SEND=\"1MiB/s,burst=64KiBx\": at column 16: unknown unit 'KiBx' (expected B, KB, KiB, MB, MiB, GB, GiB)"},
	{"SLUICE_SEND", "100/s,burst=18446744073709551615",
	 "SLUICE_SEND=\"100/s,burst=18446744073709551615\": at column 13: burst '18446744073709551615' is too large for the limiter"},
	{"SLUICE_SEND", "100/s,burst=-1",
	 "SLUICE_SEND=\"100/s,burst=-1\": at column 13: negative number '-1' (only positive numbers are allowed)"},
	{"SLUICE_SEND", "100/s,algo=gcra",
	 "SLUICE_SEND=\"100/s,algo=gcra\": at column 12: unknown algo 'gcra' (expected token, leaky, fixed, sliding)"},
	{"SLUICE_SEND", "100/s,algo=leaky,burst=5",
	 "SLUICE_SEND=\"100/s,algo=leaky,burst=5\": at column 18: option 'burst' is valid only with algo=token (the leaky bucket's queue is bounded by max-delay)"},
	{"SLUICE_SEND", "100/s,burst=5,algo=sliding",
	 "SLUICE_SEND=\"100/s,burst=5,algo=sliding\": at column 7: option 'burst' is valid only with algo=token (a window admits its whole amount at once)"},
	{"SLUICE_SEND", "100/s,action=drop",
	 "SLUICE_SEND=\"100/s,action=drop\": at column 14: unknown action 'drop' (expected delay, reject, dry-run)"},
	{"SLUICE_SEND", "100/s,action=reject,max-delay=1s",
	 "SLUICE_SEND=\"100/s,action=reject,max-delay=1s\": at column 21: option 'max-delay' is valid only with action=delay"},
	{"SLUICE_SEND", "100/s,max-delay=1s,action=dry-run",
	 "SLUICE_SEND=\"100/s,max-delay=1s,action=dry-run\": at column 7: option 'max-delay' is valid only with action=delay"},
	{"SLUICE_SEND", "100/s,max-delay=0s",
	 "SLUICE_SEND=\"100/s,max-delay=0s\": at column 17: max-delay=0s never waits: use action=reject instead"},
	{"SLUICE_SEND", "100/s,max-delay=250",
	 "SLUICE_SEND=\"100/s,max-delay=250\": at column 20: missing unit after '250' (expected us, ms, s, min, h)"},
	{"SLUICE_SEND", "100/s,max-delay=1sec",
	 "SLUICE_SEND=\"100/s,max-delay=1sec\": at column 18: unknown period 'sec' (expected us, ms, s, min, h)"},
	{"SLUICE_SEND", "100/s,max-delay=1s2",
	 "SLUICE_SEND=\"100/s,max-delay=1s2\": at column 19: unexpected '2' after the duration"},
	{"SLUICE_SEND", "100/s,max-delay=1ns",
	 "SLUICE_SEND=\"100/s,max-delay=1ns\": at column 18: unknown period 'ns' (expected us, ms, s, min, h)"},
	{"SLUICE_SEND", "100/s,max-delay=6000000h",
	 "SLUICE_SEND=\"100/s,max-delay=6000000h\": at column 17: '6000000h' is too large (more than 2^64 nanoseconds)"},
	{"SLUICE_SEND", "100/s,errno=ECONNREFUSE",
	 "SLUICE_SEND=\"100/s,errno=ECONNREFUSE\": at column 13: unknown errno name 'ECONNREFUSE' (did you mean ECONNREFUSED?)"},
	{"SLUICE_SEND", "100/s,errno=econnrefused",
	 "SLUICE_SEND=\"100/s,errno=econnrefused\": at column 13: unknown errno name 'econnrefused' (did you mean ECONNREFUSED?)"},
	{"SLUICE_SEND", "100/s,errno=ENOENT",
	 "SLUICE_SEND=\"100/s,errno=ENOENT\": at column 13: unknown errno name 'ENOENT' (expected a name such as ECONNREFUSED, ETIMEDOUT, EAGAIN, ECONNRESET)"},
	{"SLUICE_SEND", "100/s,errno=111",
	 "SLUICE_SEND=\"100/s,errno=111\": at column 13: unknown errno name '111' (expected a name such as ECONNREFUSED, ETIMEDOUT, EAGAIN, ECONNRESET)"},
	{"SLUICE_SEND", "100/s,action=dry-run,errno=EAGAIN",
	 "SLUICE_SEND=\"100/s,action=dry-run,errno=EAGAIN\": at column 22: option 'errno' is not valid with action=dry-run (nothing is refused)"},
	{"SLUICE_SEND", "100/s,per=socket",
	 "SLUICE_SEND=\"100/s,per=socket\": at column 11: unknown per 'socket' (expected process, thread, fd, peer)"},
	{"SLUICE_SEND", "100/s,to=10.0.0/8",
	 "SLUICE_SEND=\"100/s,to=10.0.0/8\": at column 10: bad IPv4 address '10.0.0' (expected four numbers 0-255 separated by dots)"},
	{"SLUICE_SEND", "100/s,to=10.0.0.256",
	 "SLUICE_SEND=\"100/s,to=10.0.0.256\": at column 10: bad IPv4 address '10.0.0.256' (expected four numbers 0-255 separated by dots)"},
	{"SLUICE_SEND", "100/s,to=10.0.0.010",
	 "SLUICE_SEND=\"100/s,to=10.0.0.010\": at column 10: bad IPv4 address '10.0.0.010': a part has a leading zero"},
	{"SLUICE_SEND", "100/s,to=10.0.0.0/33",
	 "SLUICE_SEND=\"100/s,to=10.0.0.0/33\": at column 18: bad prefix length '/33' (expected /0 to /32 for IPv4)"},
	{"SLUICE_SEND", "100/s,to=10.0.0.0/",
	 "SLUICE_SEND=\"100/s,to=10.0.0.0/\": at column 18: missing prefix length after '/'"},
	{"SLUICE_SEND", "100/s,to=10.1.0.0/8",
	 "SLUICE_SEND=\"100/s,to=10.1.0.0/8\": at column 10: '10.1.0.0/8' has bits set past the /8 prefix (did you mean 10.0.0.0/8?)"},
	{"SLUICE_SEND", "100/s,to=10.0.0.0/8:0",
	 "SLUICE_SEND=\"100/s,to=10.0.0.0/8:0\": at column 21: bad port '0' (expected 1-65535)"},
	{"SLUICE_SEND", "100/s,to=10.0.0.0/8:65536",
	 "SLUICE_SEND=\"100/s,to=10.0.0.0/8:65536\": at column 21: bad port '65536' (expected 1-65535)"},
	{"SLUICE_SEND", "100/s,to=10.0.0.0/8:",
	 "SLUICE_SEND=\"100/s,to=10.0.0.0/8:\": at column 21: expected a port number (1-65535)"},
	{"SLUICE_SEND", "100/s,to=localhost",
	 "SLUICE_SEND=\"100/s,to=localhost\": at column 10: 'localhost' is not an IP address (host names are not resolved: write e.g. to=127.0.0.1)"},
	{"SLUICE_SEND", "100/s,to=::1:8080x",
	 "SLUICE_SEND=\"100/s,to=::1:8080x\": at column 10: bad IPv6 address '::1:8080x' (with a port, write it in brackets: [::1]:8080)"},
	{"SLUICE_SEND", "100/s,to=[::1",
	 "SLUICE_SEND=\"100/s,to=[::1\": at column 10: missing ']' after the IPv6 address"},
	{"SLUICE_SEND", "100/s,to=[::1]x",
	 "SLUICE_SEND=\"100/s,to=[::1]x\": at column 15: unexpected 'x' after the IPv6 address (expected ':' and a port)"},
	{"SLUICE_SEND", "100/s,to=[::1]/129",
	 "SLUICE_SEND=\"100/s,to=[::1]/129\": at column 15: bad prefix length '/129' (expected /0 to /128 for IPv6)"},
	{"SLUICE_SEND", "100/s,to=fe80::1/10",
	 "SLUICE_SEND=\"100/s,to=fe80::1/10\": at column 10: 'fe80::1/10' has bits set past the /10 prefix (did you mean fe80::/10?)"},
	{"SLUICE_SEND", "100/s,to=1:2:3:4:5:6:7:8:9",
	 "SLUICE_SEND=\"100/s,to=1:2:3:4:5:6:7:8:9\": at column 10: bad IPv6 address '1:2:3:4:5:6:7:8:9' (with a port, write it in brackets: [::1]:8080)"},
	{"SLUICE_SEND", "100/s,to=1::2::3",
	 "SLUICE_SEND=\"100/s,to=1::2::3\": at column 10: bad IPv6 address '1::2::3' (with a port, write it in brackets: [::1]:8080)"},
	{"SLUICE_SEND", "100/s,to=12345::1",
	 "SLUICE_SEND=\"100/s,to=12345::1\": at column 10: bad IPv6 address '12345::1' (with a port, write it in brackets: [::1]:8080)"},
	{"SLUICE_SEND", "100/s,to=fe80::1%eth0",
	 "SLUICE_SEND=\"100/s,to=fe80::1%eth0\": at column 10: bad IPv6 address 'fe80::1%eth0' (with a port, write it in brackets: [::1]:8080)"},
	{"SLUICE_SEND", "100/s,to=10.0.0.0/8:443,port=80",
	 "SLUICE_SEND=\"100/s,to=10.0.0.0/8:443,port=80\": at column 25: duplicate option 'port' (to= gives port 443 too)"},
	{"SLUICE_SEND", "100/s,port=0",
	 "SLUICE_SEND=\"100/s,port=0\": at column 12: bad port '0' (expected 1-65535)"},
	{"SLUICE_SEND", "100/s,port=70000",
	 "SLUICE_SEND=\"100/s,port=70000\": at column 12: bad port '70000' (expected 1-65535)"},
	{"SLUICE_SEND", "100/s,port=90-80",
	 "SLUICE_SEND=\"100/s,port=90-80\": at column 12: empty port range '90-80' (the first port is above the last)"},
	{"SLUICE_SEND", "100/s,port=http",
	 "SLUICE_SEND=\"100/s,port=http\": at column 12: bad port 'http' (expected 1-65535)"},
	{"SLUICE_SEND", "100/s,port=80-",
	 "SLUICE_SEND=\"100/s,port=80-\": at column 15: expected a port number (1-65535)"},
	{"SLUICE_SEND", "100/s,family=ipv4",
	 "SLUICE_SEND=\"100/s,family=ipv4\": at column 14: unknown family 'ipv4' (expected inet, inet6, unix)"},
	{"SLUICE_SEND", "100/s,family=inet+inet",
	 "SLUICE_SEND=\"100/s,family=inet+inet\": at column 19: family 'inet' is listed twice"},
	{"SLUICE_SEND", "100/s,family=inet+",
	 "SLUICE_SEND=\"100/s,family=inet+\": at column 19: expected a family (inet, inet6, unix)"},
	{"SLUICE_SEND", "100/s,family=unix,to=10.0.0.0/8",
	 "SLUICE_SEND=\"100/s,family=unix,to=10.0.0.0/8\": at column 22: to= is an IPv4 address but family= leaves out inet and inet6: the rule could never match"},
	{"SLUICE_SEND", "100/s,to=::1,family=inet",
	 "SLUICE_SEND=\"100/s,to=::1,family=inet\": at column 10: to= is an IPv6 address but family= leaves out inet6: the rule could never match"},
	{"SLUICE_SEND", "100/s,family=unix,port=80",
	 "SLUICE_SEND=\"100/s,family=unix,port=80\": at column 19: option 'port' can never match with family=unix"},
	{"SLUICE_SEND", "100/s,type=raw",
	 "SLUICE_SEND=\"100/s,type=raw\": at column 12: unknown type 'raw' (expected stream, dgram)"},
	{"SLUICE_SEND", "100/s,type=stream+stream",
	 "SLUICE_SEND=\"100/s,type=stream+stream\": at column 19: type 'stream' is listed twice"},
	{"SLUICE_CONNECT", "1MiB/s",
	 "SLUICE_CONNECT=\"1MiB/s\": at column 2: connect is limited in calls, not bytes (drop the unit, e.g. 10/s)"},
	{"SLUICE_CONNECT", "10/s,per=fd",
	 "SLUICE_CONNECT=\"10/s,per=fd\": at column 10: per=fd is not valid for connect (each connection has its own fd)"},
	{"SLUICE_ACCEPT", "1KB/s",
	 "SLUICE_ACCEPT=\"1KB/s\": at column 2: accept is limited in calls, not bytes (drop the unit, e.g. 10/s)"},
	{"SLUICE_ACCEPT", "10/s,type=dgram",
	 "SLUICE_ACCEPT=\"10/s,type=dgram\": at column 11: type=dgram is not valid for accept (datagram sockets have no connections)"},
	{"SLUICE_CONNS", "0",
	 "SLUICE_CONNS=\"0\": at column 1: zero count: no connection could ever be opened"},
	{"SLUICE_CONNS", "10/s",
	 "SLUICE_CONNS=\"10/s\": at column 3: conns takes a count of open connections, not a rate (e.g. conns:100)"},
	{"SLUICE_CONNS", "10MiB",
	 "SLUICE_CONNS=\"10MiB\": at column 3: conns takes a count of open connections, not bytes (e.g. conns:100)"},
	{"SLUICE_CONNS", "10x",
	 "SLUICE_CONNS=\"10x\": at column 3: unknown unit 'x' (expected B, KB, KiB, MB, MiB, GB, GiB)"},
	{"SLUICE_CONNS", "2.5",
	 "SLUICE_CONNS=\"2.5\": at column 1: '2.5' is not a whole number of calls"},
	{"SLUICE_CONNS", "100,burst=5",
	 "SLUICE_CONNS=\"100,burst=5\": at column 5: option 'burst' is not valid for conns (conns limits how many connections are open at once)"},
	{"SLUICE_CONNS", "100,algo=token",
	 "SLUICE_CONNS=\"100,algo=token\": at column 5: option 'algo' is not valid for conns (conns limits how many connections are open at once)"},
	{"SLUICE_CONNS", "100,per=fd",
	 "SLUICE_CONNS=\"100,per=fd\": at column 9: per=fd is not valid for conns (each connection has its own fd)"},
	{"SLUICE_CONNS", "100,type=stream+dgram",
	 "SLUICE_CONNS=\"100,type=stream+dgram\": at column 10: type=dgram is not valid for conns (datagram sockets have no connections)"},
	{"SLUICE_SEND", "1MiB/s,nonblock=wait",
	 "SLUICE_SEND=\"1MiB/s,nonblock=wait\": at column 17: unknown nonblock 'wait' (expected eagain, sleep)"},
	{"SLUICE_SEND", "1MiB/s,action=reject,nonblock=sleep",
	 "SLUICE_SEND=\"1MiB/s,action=reject,nonblock=sleep\": at column 22: option 'nonblock' is valid only with action=delay (nothing else waits)"},
	{"SLUICE_CONNS", ",action=reject",
	 "SLUICE_CONNS=\",action=reject\": at column 1: expected a count before the first ','"},
	{"SLUICE_RULES", "send:1/s;",
	 "SLUICE_RULES=\"send:1/s;\": at column 10: empty rule (expected OP:SPEC, e.g. send:1MiB/s)"},
	{"SLUICE_RULES", ";send:1/s",
	 "SLUICE_RULES=\";send:1/s\": at column 1: empty rule (expected OP:SPEC, e.g. send:1MiB/s)"},
	{"SLUICE_RULES", "send:1/s;;recv:1/s",
	 "SLUICE_RULES=\"send:1/s;;recv:1/s\": at column 10: empty rule (expected OP:SPEC, e.g. send:1MiB/s)"},
	{"SLUICE_RULES", "sned:1/s",
	 "SLUICE_RULES=\"sned:1/s\": at column 1: unknown operation 'sned' (did you mean send?)"},
	{"SLUICE_RULES", "write:1/s",
	 "SLUICE_RULES=\"write:1/s\": at column 1: unknown operation 'write' (expected connect, accept, send, recv, conns, break)"},
	{"SLUICE_RULES", "send",
	 "SLUICE_RULES=\"send\": at column 5: expected ':' and a limit after 'send' (e.g. send:1MiB/s)"},
	{"SLUICE_RULES", "1MiB/s",
	 "SLUICE_RULES=\"1MiB/s\": at column 1: unknown operation '1MiB/s' (expected connect, accept, send, recv, conns, break)"},
	{"SLUICE_RULES", "send:",
	 "SLUICE_RULES=\"send:\": at column 6: empty rule (expected a rate such as 100/s or 1MiB/s)"},
	{"SLUICE_RULES", "send:1/s;recv:1Mib/s",
	 "SLUICE_RULES=\"send:1/s;recv:1Mib/s\": at column 16: unknown unit 'Mib' (expected B, KB, KiB, MB, MiB, GB, GiB)"},
	{"SLUICE_RULES", "connect:1/s,to=[::1]:80;conns:0",
	 "SLUICE_RULES=\"connect:1/s,to=[::1]:80;conns:0\": at column 31: zero count: no connection could ever be opened"},
	{"SLUICE_SNED", "1MiB/s",
	 "SLUICE_SNED=\"1MiB/s\": unknown variable (did you mean SLUICE_SEND?)"},
	{"SLUICE_FOO", "1",
	 "SLUICE_FOO=\"1\": unknown variable (expected one of SLUICE_CONNECT, SLUICE_ACCEPT, SLUICE_SEND, SLUICE_RECV, SLUICE_CONNS, SLUICE_RULES, SLUICE_LOG, SLUICE_LOG_FILE, SLUICE_ONLY, SLUICE_SKIP, SLUICE_STATS, SLUICE_CONFIG_ERROR, SLUICE_REDIS, SLUICE_BREAK)"},
	{"SLUICE_send", "1MiB/s",
	 "SLUICE_send=\"1MiB/s\": unknown variable (did you mean SLUICE_SEND?)"},
	{"SLUICE_LOG", "verbose",
	 "SLUICE_LOG=\"verbose\": at column 1: unknown log level 'verbose' (expected error, warn, info, debug)"},
	{"SLUICE_LOG", "",
	 "SLUICE_LOG=\"\": at column 1: unknown log level '' (expected error, warn, info, debug)"},
	{"SLUICE_CONFIG_ERROR", "ignore",
	 "SLUICE_CONFIG_ERROR=\"ignore\": at column 1: unknown mode 'ignore' (expected exit, warn)"},
	{"SLUICE_LOG_FILE", "",
	 "SLUICE_LOG_FILE=\"\": at column 1: empty path (unset the variable instead)"},
	{"SLUICE_ONLY", "curl++wget",
	 "SLUICE_ONLY=\"curl++wget\": at column 6: expected a program name (names are separated by '+')"},
	{"SLUICE_ONLY", "/usr/bin/curl",
	 "SLUICE_ONLY=\"/usr/bin/curl\": at column 1: '/usr/bin/curl' has a '/': program names are matched without their directory"},
	{"SLUICE_ONLY", "",
	 "SLUICE_ONLY=\"\": at column 1: expected a program name (names are separated by '+')"},
	{"SLUICE_SEND", "1Mib/s\n",
	 "SLUICE_SEND=\"1Mib/s\\x0a\": at column 2: unknown unit 'Mib' (expected B, KB, KiB, MB, MiB, GB, GiB)"},
	{"SLUICE_SEND", "1MiB/s,to=10.0.0.0/8,to=::1",
	 "SLUICE_SEND=\"1MiB/s,to=10.0.0.0/8,to=::1\": at column 22: duplicate option 'to' (first given at column 8)"},
	{"SLUICE_SEND", "100/s,to=fe80::/10:x",
	 "SLUICE_SEND=\"100/s,to=fe80::/10:x\": at column 20: bad port 'x' (expected 1-65535)"},
	{"SLUICE_SEND", "100/s,to=[::1]:80:90",
	 "SLUICE_SEND=\"100/s,to=[::1]:80:90\": at column 16: bad port '80:90' (expected 1-65535)"},
	{"SLUICE_SEND", "100/s,to=,port=80",
	 "SLUICE_SEND=\"100/s,to=,port=80\": at column 10: missing value after 'to='"},
	{"SLUICE_CONNECT", "10/s,to=[]:80",
	 "SLUICE_CONNECT=\"10/s,to=[]:80\": at column 10: bad IPv6 address ''"},
};

static const struct policy_case redis_cases[] = {
	{"SLUICE_REDIS", "redis://127.0.0.1:6379", "redis://127.0.0.1:6379"},
	{"SLUICE_REDIS", "redis://localhost", "redis://localhost:6379"},
	{"SLUICE_REDIS", "redis://10.0.0.5:7000/0", "redis://10.0.0.5:7000"},
	{"SLUICE_REDIS", "redis://[::1]:6380/3", "redis://[::1]:6380/3"},
	{"SLUICE_REDIS", "redis://:s3cret@h:1/2", "redis://:***@h:1/2"},
	{"SLUICE_REDIS", "redis://app:s3cret@h", "redis://app:***@h:6379"},
	{"SLUICE_REDIS", "redis://app:s3c@r:et@h", "redis://app:***@h:6379"},
	{"SLUICE_REDIS", "unix:///run/redis/redis.sock", "unix:///run/redis/redis.sock"},
	{"SLUICE_REDIS", "redis+cluster://10.0.0.1:7000,10.0.0.2,[::1]:7002",
	 "redis+cluster://10.0.0.1:7000,10.0.0.2:6379,[::1]:7002"},
	{"SLUICE_REDIS", "redis+cluster://app:s3c@,r@h1:7000", "redis+cluster://app:***@h1:7000"},
	{"SLUICE_REDIS", "redis+sentinel://s1,s2:26380,s3/mymaster",
	 "redis+sentinel://s1:26379,s2:26380,s3:26379/mymaster"},
	{"SLUICE_REDIS", "redis+sentinel://:s3cret/x@s1:5000/main.db-1_a/7",
	 "redis+sentinel://:***@s1:5000/main.db-1_a/7"},
};

#define N_VALID (sizeof valid_cases / sizeof valid_cases[0])
#define N_ERROR (sizeof error_cases / sizeof error_cases[0])
#define N_REDIS (sizeof redis_cases / sizeof redis_cases[0])

/* print(parse(print(r))) == print(r) and parse(print(r)) == r. */
static void assert_round_trip(const struct sl_rule *r)
{
	char text[SL_RULE_TEXT_MAX], again[SL_RULE_TEXT_MAX], err[SL_ERR_MAX];
	struct sl_policy p;

	assert_true(sl_rule_format(r, text, sizeof text) < sizeof text);
	sl_policy_init(&p);
	if (sl_policy_parse_var(&p, "SLUICE_RULES", text, err, sizeof err) != 0)
		fail_msg("canonical text '%s' does not parse: %s", text, err);
	assert_dec_equal(p.n_rules, 1);
	assert_true(sl_rule_equal(r, &p.rules[0]));
	sl_rule_format(&p.rules[0], again, sizeof again);
	assert_string_equal(text, again);
}

static void test_policy_valid(void **state)
{
	const struct policy_case *tc = *state;
	char err[SL_ERR_MAX], joined[1024] = "", text[SL_RULE_TEXT_MAX];
	struct sl_policy p;

	sl_policy_init(&p);
	if (sl_policy_parse_var(&p, tc->var, tc->value, err, sizeof err) != 0)
		fail_msg("%s=\"%s\" should parse, got: %s", tc->var, tc->value, err);
	for (uint32_t i = 0; i < p.n_rules; i++) {
		sl_rule_format(&p.rules[i], text, sizeof text);
		if (i > 0)
			strcat(joined, ";");
		strcat(joined, text);
		assert_round_trip(&p.rules[i]);
	}
	for (uint32_t i = 0; i < p.n_breaks; i++) {
		struct sl_policy back;
		sl_break_format(&p.breaks[i], text, sizeof text);
		if (joined[0] != '\0')
			strcat(joined, ";");
		strcat(joined, text);
		/* The canonical text parses back to the same breaker. */
		sl_policy_init(&back);
		if (sl_policy_parse_var(&back, "SLUICE_RULES", text, err, sizeof err) != 0)
			fail_msg("canonical text '%s' does not parse: %s", text, err);
		assert_dec_equal(back.n_breaks, 1);
		assert_true(sl_break_equal(&back.breaks[0], &p.breaks[i]));
	}
	assert_string_equal(joined, tc->expected);
}

static void test_policy_error(void **state)
{
	const struct policy_case *tc = *state;
	char err[SL_ERR_MAX];
	struct sl_policy p, before;

	sl_policy_init(&p);
	before = p;
	assert_dec_equal(sl_policy_parse_var(&p, tc->var, tc->value, err, sizeof err), -1);
	assert_string_equal(err, tc->expected);
	assert_memory_equal(&p, &before, sizeof p); /* unchanged on error */
}

static void test_policy_redis(void **state)
{
	const struct policy_case *tc = *state;
	char err[SL_ERR_MAX], text[SL_ERR_MAX];
	struct sl_policy p;

	sl_policy_init(&p);
	if (sl_policy_parse_var(&p, tc->var, tc->value, err, sizeof err) != 0)
		fail_msg("%s=\"%s\" should parse, got: %s", tc->var, tc->value, err);
	assert_true(sl_redis_format(&p.redis, text, sizeof text) < sizeof text);
	assert_string_equal(text, tc->expected);
	assert_null(strstr(text, "s3c"));
	const char *pw = strstr(tc->value, "s3c");
	if (pw != NULL) { /* the password is kept whole: up to the last '@' */
		size_t n = (size_t)(strrchr(tc->value, '@') - pw);
		assert_dec_equal(strlen(p.redis.pass), n);
		assert_memory_equal(p.redis.pass, pw, n);
	}
}

/* A redis=KEY rule needs SLUICE_REDIS, whatever order the variables come in. */
static void test_policy_redis_needed(void **state)
{
	const char *without[] = {"SLUICE_CONNECT=500/s,redis=k", NULL};
	const char *with[] = {"SLUICE_CONNECT=500/s,redis=k", "SLUICE_REDIS=unix:///r.sock", NULL};
	char err[SL_ERR_MAX];
	struct sl_policy p;

	(void)state;
	sl_policy_init(&p);
	assert_dec_equal(sl_policy_parse_env(&p, without, err, sizeof err), -1);
	assert_string_equal(err,
			    "SLUICE_REDIS=\"\": not set, but rule 1 (connect:500/s,redis=k) "
			    "keeps its state on Redis (e.g. SLUICE_REDIS=redis://127.0.0.1:6379)");
	assert_dec_equal(p.n_rules, 0);
	assert_dec_equal(sl_policy_parse_env(&p, with, err, sizeof err), 0);
	assert_dec_equal(p.n_rules, 1);
	assert_dec_equal(p.redis.kind, SL_REDIS_UNIX);
	assert_dec_equal(p.rules[0].lease, 5); /* max(burst 3, 10 ms of 500/s) */
}

static void add_cases(struct CMUnitTest *t, size_t *n, const struct policy_case *cases,
		      size_t count, CMUnitTestFunction fn)
{
	for (size_t i = 0; i < count; i++) {
		t[*n] = (struct CMUnitTest){.name = cases[i].value,
					    .test_func = fn,
					    .initial_state = (void *)&cases[i]};
		(*n)++;
	}
}

int main(void)
{
	static struct CMUnitTest tests[N_VALID + N_ERROR + N_REDIS + 1];
	size_t n = 0;

	add_cases(tests, &n, valid_cases, N_VALID, test_policy_valid);
	add_cases(tests, &n, error_cases, N_ERROR, test_policy_error);
	add_cases(tests, &n, redis_cases, N_REDIS, test_policy_redis);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_policy_redis_needed);
	return _cmocka_run_group_tests("policy_cases", tests, n, NULL, NULL);
}
