/* SPDX-License-Identifier: MIT */
/*
 * anchors.h - one variable in each file of exported wrappers, for the unit
 * tests: a test that names the anchor links that file from the archive even
 * when a sanitizer runtime already defines the libc names it exports. Only
 * the wrapper files (which define them) and tests include this header, so
 * no file below the wrappers depends on them.
 */
#ifndef SLUICE_SHIM_ANCHORS_H
#define SLUICE_SHIM_ANCHORS_H

extern const int sl__wrap_send_anchor, sl__wrap_recv_anchor, sl__wrap_sock_anchor,
	sl__wrap_sockopt_anchor, sl__poll_anchor, sl__epoll_anchor, sl__epwait_anchor,
	sl__wrap_fd_anchor, sl__exit_anchor;

#endif /* SLUICE_SHIM_ANCHORS_H */
