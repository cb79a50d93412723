/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nbd_allow.h - who may make the daemon connect where. A daemon running
 * as root opens the NBD connections its clients name; without a policy a
 * user could make it reach any server its own network access (firewall
 * rules by uid, Unix socket permissions) does not. So a URI a client
 * names is connected to only when the client is root, or a line of the
 * administrator's allow list names the client and the server:
 *
 *   # /etc/faultd/nbd.allow: USER SERVER, one pair a line
 *   alice   10.0.0.5:10809       # that server and port
 *   alice   storage.example      # that host, any port
 *   *       [fd00::5]:10809      # every user
 *   1001    unix:/run/nbd/       # any socket in /run/nbd/ (not below it)
 *   bob     unix:/run/nbd/a.sock # that socket
 *   bob     vsock:2              # the host of a VM, any port
 *
 * USER is a user name (looked up when the list is loaded), a uid, or '*'.
 * SERVER is compared with what the URI names, as written: no name is
 * resolved, so a host allowed by name is not allowed by its address or
 * the other way round; host names compare without case. A directory entry
 * ("unix:DIR/") allows the sockets directly in DIR, which its owner must
 * keep from users it does not trust. A URI that names files of the
 * daemon's host (tls-psk-file=, tls-certificates=) is root's only: the
 * TLS credentials of users come from the administrator's options.
 * The parts compared are nbd_uri.h's, the very ones connected to.
 */
#ifndef FAULTD_SRC_NBD_ALLOW_H
#define FAULTD_SRC_NBD_ALLOW_H

#include <stddef.h>
#include <sys/types.h>

#define NBD_ALLOW_FILE "/etc/faultd/nbd.allow"

struct nbd_allow;

/*
 * nbd_allow_load() - the list in the file at @path; a file that does not
 * exist is an empty list (root alone). nbd_allow_parse() - the same from
 * @text, @name standing for the file in messages. Returns 0 and the list
 * in *out, or -errno with the reason in @why: -EINVAL for a line that is
 * not USER SERVER (with its number), an unknown user; what fopen() said;
 * -ENOMEM. nbd_allow_free() accepts NULL.
 */
int nbd_allow_load(const char *path, struct nbd_allow **out, char *why,
		   size_t why_len);
int nbd_allow_parse(const char *text, const char *name,
		    struct nbd_allow **out, char *why, size_t why_len);
void nbd_allow_free(struct nbd_allow *a);

/*
 * nbd_allow_check() - may a client of uid @uid make the daemon open @uri?
 * Returns 0 (allowed; @why says by what), -EPERM (refused; @why says
 * why), or -EINVAL (not a URI nbd_uri.h accepts; @why says why). @a may
 * be NULL: no list, root alone. Context: any thread; @a is not changed.
 */
int nbd_allow_check(const struct nbd_allow *a, uid_t uid, const char *uri,
		    char *why, size_t why_len);

#endif /* FAULTD_SRC_NBD_ALLOW_H */
