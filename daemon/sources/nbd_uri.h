/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nbd_uri.h - NBD URIs, parsed once into what the source connects to.
 *
 * The source never hands a URI to nbd_connect_uri(): it parses it here
 * and connects from the parts (nbd_aio_connect_tcp / _unix / _vsock), so
 * that the server the allow list checked (nbd_allow.h) is exactly the one
 * connected to - no second parser to disagree with the first. The grammar
 * is the NBD URI specification's as libnbd 1.14 accepts it:
 *
 *   nbd[s]://[USER@]HOST[:PORT][/EXPORT]          TCP (PORT 10809)
 *   nbd[s]+unix://[USER@]/[EXPORT]?socket=PATH    a Unix socket
 *   nbd[s]+vsock://[USER@]CID[:PORT][/EXPORT]     AF_VSOCK
 *
 * "nbds" requires TLS; USER is the TLS user name (PSK); the query may also
 * hold tls-psk-file=FILE and tls-certificates=DIR (files of the daemon's
 * host: nbd_allow.h lets only root name them). EXPORT, USER and query
 * values are percent-decoded. Stricter than libnbd: HOST is a DNS name,
 * an IPv4 address or a bracketed IPv6 address (no zone), nothing else;
 * no fragment; no query key but those three; no %00.
 */
#ifndef FAULTD_SRC_NBD_URI_H
#define FAULTD_SRC_NBD_URI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NBD_URI_PORT 10809

enum nbd_transport {
	NBD_TCP,
	NBD_UNIX,
	NBD_VSOCK,
};

struct nbd_uri {
	enum nbd_transport transport;
	bool tls;
	char *host;		/* TCP: as written, IPv6 without brackets */
	uint32_t cid;		/* vsock */
	uint16_t port;		/* TCP and vsock */
	char *socket;		/* Unix */
	char *export;		/* "" when none */
	char *user;		/* NULL when none */
	char *tls_psk_file;	/* NULL when not in the URI */
	char *tls_certificates;	/* NULL when not in the URI */
	/*
	 * The server and export in one canonical spelling (default port
	 * written, minimal percent-encoding, no local file parameters):
	 * what the source's identity and sharing are keyed on.
	 */
	char *canon;
};

/*
 * nbd_uri_parse() - parse @uri into *u. Returns 0, or -EINVAL with the
 * reason in @why (a URI this grammar does not accept), or -ENOMEM.
 * nbd_uri_free() frees what it holds, also after a failure.
 */
int nbd_uri_parse(const char *uri, struct nbd_uri *u, char *why,
		  size_t why_len);
void nbd_uri_free(struct nbd_uri *u);

/* The server part alone, for messages: "HOST:PORT", "unix:PATH", ... */
int nbd_uri_server(const struct nbd_uri *u, char *buf, size_t len);

#endif /* FAULTD_SRC_NBD_URI_H */
