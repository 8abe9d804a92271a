/* SPDX-License-Identifier: MIT */
/*
 * conns.c - conns rules (at most N connections open at once) for supervised
 * programs.
 *
 * A connect or accept that a conns rule matches takes one unit of the rule's
 * concurrency limiter (core/concurrency.c) before it proceeds; while the
 * limit is full, a delay rule holds the call and asks again as the engine
 * says (engine/decide.h: a backoff of 1 ms doubling to 50 ms, up to
 * max-delay, as the preload waits), a reject rule refuses it. A
 * non-blocking accept is held too, never answered EAGAIN while a connection
 * is pending: Go's edge-triggered poller would not hear of it again.
 *
 * The supervisor does not trap close (nor dup2, close_range, exec, exit):
 * it remembers each connection as (process, fd, socket inode) and gives the
 * slot back once no supervised process has an fd naming that inode any
 * more, checked at every retry of a waiting call and every sweep. So a slot
 * comes back at most one backoff (50 ms) after the last close when a call
 * waits for it. The fd that opened it is looked at first; once it no longer
 * names the inode, every supervised process's fds are (a fork-per-connection
 * server closes its copy at once, and its child, or the program the child
 * exec'd, serves the connection), and the one found is looked at first
 * from then on. As in the preload (shim/connfam.c), a connection counts
 * until the last process holding it closes it; one passed (SCM_RIGHTS) to a
 * process the supervisor does not see counts until the last one it sees.
 *
 * conns:adaptive rules (turn.c) take their slot here too, from the rule's
 * one limiter for the supervised tree (sl_sup_lim_of); an accepted
 * connection hands it to its first turn (sl_sup_turn_accepted), and its
 * hold, made all the same, tells turn.c when the connection is gone. They
 * do not apply to connect (sock.c leaves them out: a client's turns take
 * their slots at each request, client.c).
 * The gate slots an accept took (system protection, c->gates_held) go to
 * the first turn the same way, with a hold of their own if no conns slot
 * makes one. A client's connection with turns (client.c) has a hold with
 * no slot (sl_sup_conns_follow): its close ends a turn still running.
 */
#include "conns.h"
#include "admit.h"
#include "filter.h"
#include "gate.h"
#include "state.h"
#include "target.h"
#include "turn.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

struct sl_sup_hold {
	struct sl_sup_proc *proc;
	int fd;
	ino_t ino;
	pid_t alt_tgid; /* another process found holding it (0: none yet) */
	int alt_fd;
	uint32_t rules; /* slots held until the connection closes */
	uint64_t turn;  /* slots of its turns (turn.c holds them; gate.h: SL_SUP_GATE),
			 * or 1: a client's turns (client.c) */
	struct sl_limiter *lim[SL_MAX_RULES];
};

/* The connections holding slots. */
static struct sl_sup_hold *holds;
static size_t n_holds, cap_holds;

static void release(struct sl_limiter *const *lim, uint32_t rules)
{
	for (uint32_t rest = rules; rest != 0; rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		if (lim[i] != NULL)
			sl_limiter_release(lim[i], 1);
	}
}

enum sl_sup_verdict sl_sup_conns_take(struct sl_sup *s, struct sl_sup_call *c, uint64_t now_ns,
				      uint64_t *wait_ns, int *err)
{
	uint32_t taken = 0;
	if (c->conns_rules == 0 || c->conns_taken)
		return SL_SUP_GO;
	sl_sup_conns_sweep(s);
	for (uint32_t rest = c->conns_rules; rest != 0; rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		const struct sl_rule *r = &s->policy.rules[i];
		struct sl_limiter *l = sl_sup_lim_of(s, c, i, now_ns);
		c->conns_lim[i] = l;
		if (l == NULL)
			continue;
		struct sl_decision d = sl_limiter_acquire(l, 1, now_ns, 0);
		if (d.verdict == SL_ADMIT) {
			taken |= 1u << i;
			continue;
		}
		if ((s->traps.turns >> i) & 1)
			sl_sup_turn_bound(s, i, now_ns); /* the adaptive limit binds */
		uint64_t limit = sl_sup_limit(s, c, i);
		struct sl_answer a = sl_decide_rule(r, l, 1, now_ns, limit, d);
		if (a.step == SL_STEP_DRY) {
			sl_sup_settle(s, c, i, a, now_ns, limit, wait_ns, err);
			continue;
		}
		release(c->conns_lim, taken);
		return sl_sup_settle(s, c, i, a, now_ns, limit, wait_ns, err);
	}
	c->conns_held = taken;
	c->conns_taken = true;
	return SL_SUP_GO;
}

void sl_sup_conns_drop(struct sl_sup *s, struct sl_sup_call *c)
{
	release(c->conns_lim, c->conns_held);
	c->conns_held = 0;
	sl_sup_gates_drop(s, c->gates_held);
	c->gates_held = 0;
}

ino_t sl_sup_fd_ino(const struct sl_sup_proc *p, int fd)
{
	char name[16];
	struct stat st;
	snprintf(name, sizeof(name), "%d", fd);
	return fd >= 0 && p->fddir >= 0 && fstatat(p->fddir, name, &st, 0) == 0 ? st.st_ino : 0;
}

/* Give back the slots of rules `turn` that call c took: 0. */
static uint32_t give_back(struct sl_sup_call *c, uint32_t turn)
{
	release(c->conns_lim, turn);
	c->conns_held &= ~turn;
	return 0;
}

/* Give back the gate slots call c took: 0. */
static uint32_t gates_back(struct sl_sup *s, struct sl_sup_call *c)
{
	sl_sup_gates_drop(s, c->gates_held);
	c->gates_held = 0;
	return 0;
}

/* Room for one more hold: false without memory. */
static bool room(void)
{
	if (n_holds < cap_holds)
		return true;
	size_t n = cap_holds ? cap_holds * 2 : 64;
	struct sl_sup_hold *h = realloc(holds, n * sizeof(*h));
	if (h == NULL)
		return false;
	holds = h;
	cap_holds = n;
	return true;
}

void sl_sup_conns_hold(struct sl_sup *s, struct sl_sup_call *c, int fd, ino_t ino, uint64_t now_ns)
{
	if (c->conns_held == 0 && c->gates_held == 0)
		return;
	struct sl_sup_proc *p = c->th->proc;
	if (ino == 0)
		ino = sl_sup_fd_ino(p, fd);
	if (fd < 0 || ino == 0) {
		sl_sup_conns_drop(s, c); /* gone already */
		return;
	}
	/* Adaptive and gate slots: the connection's first turn, if its sends
	 * and receives are trapped where it landed; else not followed, and
	 * given back at once, as if it had answered. */
	uint32_t turn = c->conns_held & s->traps.turns, gates = c->gates_held;
	if ((turn | gates) != 0 && !sl_sup_traps_fd(&s->traps, fd)) {
		turn = give_back(c, turn);
		gates = gates_back(s, c);
	}
	if (c->conns_held == 0 && gates == 0)
		return;
	if (!room()) {
		sl_sup_conns_drop(s, c);
		return;
	}
	const uint64_t slots = turn | (uint64_t)gates << SL_SUP_GATE;
	if (slots != 0 && !sl_sup_turn_accepted(s, ino, slots, now_ns)) {
		turn = give_back(c, turn);
		gates = gates_back(s, c);
	}
	c->gates_held = 0; /* the turn's now */
	if (c->conns_held == 0 && gates == 0)
		return;
	struct sl_sup_hold *h = &holds[n_holds++];
	h->proc = p;
	h->fd = fd;
	h->ino = ino;
	h->alt_tgid = 0;
	h->alt_fd = -1;
	h->rules = c->conns_held & ~turn;
	h->turn = turn | (uint64_t)gates << SL_SUP_GATE;
	for (unsigned i = 0; i < SL_MAX_RULES; i++)
		h->lim[i] = c->conns_lim[i];
	p->refs++; /* the limiters live in the process entry */
	c->conns_held = 0;
}

bool sl_sup_conns_follow(struct sl_sup *s, struct sl_sup_proc *p, int fd, ino_t ino)
{
	(void)s;
	if (fd < 0 || ino == 0 || !room())
		return false;
	struct sl_sup_hold *h = &holds[n_holds++];
	*h = (struct sl_sup_hold){.proc = p, .fd = fd, .ino = ino, .alt_fd = -1};
	h->turn = 1; /* a client's turns: the inode is all turn.c needs */
	p->refs++;
	return true;
}

/* Whether fd `name` of directory fddir (a /proc/TGID/fd) names inode ino. */
static bool names(int fddir, const char *name, ino_t ino)
{
	struct stat st;
	return fddir >= 0 && fstatat(fddir, name, &st, 0) == 0 && st.st_ino == ino;
}

/* Whether some fd of process tgid names ino; *fd gets the first found. */
static bool proc_holds(pid_t tgid, ino_t ino, int *fd)
{
	char path[40];
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)tgid);
	int d = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *dir = d >= 0 ? fdopendir(d) : NULL;
	if (dir == NULL) {
		if (d >= 0)
			close(d);
		return false;
	}
	bool found = false;
	for (struct dirent *e; !found && (e = readdir(dir)) != NULL;)
		if (e->d_name[0] != '.' && names(d, e->d_name, ino)) {
			*fd = atoi(e->d_name);
			found = true;
		}
	closedir(dir);
	return found;
}

/* Processes one search looks at, at most (a fork bomb is not searched). */
#define SL_SUP_TREE_MAX 4096

/* Whether process tgid or one of its descendants (the children files of
 * its threads, /proc/TGID/task/TID/children) holds ino; *budget bounds the
 * search. The holder found goes to *alt, *fd. */
static bool tree_holds(pid_t tgid, ino_t ino, int *budget, pid_t *alt, int *fd)
{
	if (--*budget < 0)
		return false;
	if (proc_holds(tgid, ino, fd)) {
		*alt = tgid;
		return true;
	}
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task", (int)tgid);
	DIR *tasks = opendir(path);
	bool found = false;
	for (struct dirent *t; tasks != NULL && !found && (t = readdir(tasks)) != NULL;) {
		if (t->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%.12s/children", (int)tgid, t->d_name);
		FILE *f = fopen(path, "re");
		for (int child; f != NULL && !found && fscanf(f, "%d", &child) == 1;)
			found = tree_holds((pid_t)child, ino, budget, alt, fd);
		if (f != NULL)
			fclose(f);
	}
	if (tasks != NULL)
		closedir(tasks);
	return found;
}

/* Whether some supervised process still holds h's connection: the fd that
 * opened it, the holder found last, then the opener's process and its
 * descendants (a fork child that made no trapped call is not met
 * otherwise), then every process met. */
static bool held(struct sl_sup *s, struct sl_sup_hold *h)
{
	char name[16];
	snprintf(name, sizeof(name), "%d", h->fd);
	if (names(h->proc->fddir, name, h->ino))
		return true;
	snprintf(name, sizeof(name), "/proc/%d/fd/%d", (int)h->alt_tgid, h->alt_fd);
	struct stat st;
	if (h->alt_tgid != 0 && stat(name, &st) == 0 && st.st_ino == h->ino)
		return true;
	int budget = SL_SUP_TREE_MAX;
	if (tree_holds(h->proc->tgid, h->ino, &budget, &h->alt_tgid, &h->alt_fd))
		return true;
	for (size_t b = 0; b < s->procs_cap; b++)
		for (const struct sl_sup_proc *p = s->procs[b]; p != NULL; p = p->next)
			if (p != h->proc && !p->pass && proc_holds(p->tgid, h->ino, &h->alt_fd)) {
				h->alt_tgid = p->tgid;
				return true;
			}
	return false;
}

void sl_sup_conns_sweep(struct sl_sup *s)
{
	for (size_t k = 0; k < n_holds;) {
		struct sl_sup_hold *h = &holds[k];
		/* Asked twice before the slot goes back: a children file read
		 * while a sibling before the holder is reaped can skip the
		 * holder (the kernel finds the next child by its position
		 * then; proc(5): reliable only with the children stopped). CI
		 * once saw busybox httpd's third connection admitted while its
		 * first two children were reaped (answers at 1.06, 1.07, 2.10,
		 * 2.10, 2.11 s under --conns 2). */
		if (held(s, h) || held(s, h)) {
			k++;
			continue;
		}
		release(h->lim, h->rules);
		if (h->turn != 0)
			sl_sup_turn_gone(s, h->ino); /* a turn still running: its slots */
		h->proc->refs--;
		holds[k] = holds[--n_holds];
	}
}

void sl_sup_conns_free(void)
{
	free(holds);
	holds = NULL;
	n_holds = cap_holds = 0;
}
