// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * log.c - the daemon's log: a line to standard error per call, written
 * whole, with its level, and with the priority prefix of sd-daemon(3)
 * when standard error is the journal (common.h says when).
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

#define LINE_MAX_BYTES 2048

static int max_level = LOG_WARNING;
static int journal = -1;	/* -1: not looked at yet; 0 no, 1 yes */

/* -v: LOG_INFO; -v -v: LOG_DEBUG. Context: before threads start. */
void log_set_verbosity(int verbose)
{
	max_level = verbose <= 0 ? LOG_WARNING
		    : verbose == 1 ? LOG_INFO : LOG_DEBUG;
}

bool log_enabled(int level)
{
	return level <= max_level;
}

/* Is standard error the stream $JOURNAL_STREAM ("DEV:INO") names? */
static bool stderr_is_journal(void)
{
	const char *e = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	return e && sscanf(e, "%llu:%llu", &dev, &ino) == 2 &&
	       !fstat(STDERR_FILENO, &st) &&
	       (unsigned long long)st.st_dev == dev &&
	       (unsigned long long)st.st_ino == ino;
}

static const char *level_name(int level)
{
	switch (level) {
	case LOG_EMERG:
	case LOG_ALERT:
	case LOG_CRIT:
	case LOG_ERR: return "error";
	case LOG_WARNING: return "warning";
	case LOG_NOTICE:
	case LOG_INFO: return "info";
	default: return "debug";
	}
}

void dlog(int level, const char *fmt, ...)
{
	char line[LINE_MAX_BYTES];
	va_list ap;
	int n;

	if (!log_enabled(level))
		return;
	/* A benign race: every thread computes the same answer. */
	if (journal < 0)
		journal = stderr_is_journal();
	if (journal)
		n = snprintf(line, sizeof(line), "<%d>faultd: %s: ", level,
			     level_name(level));
	else
		n = snprintf(line, sizeof(line), "faultd: %s: ",
			     level_name(level));
	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2; /* cut, still one line */
	line[n++] = '\n';
	(void)!write(STDERR_FILENO, line, (size_t)n);
}
