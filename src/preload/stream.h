/*
 * stream.h — what stdio.c's registry knows of a FILE stream on a kura file,
 * for wstdio.c's wide-character calls on it.
 */
#ifndef KURA_PRELOAD_STREAM_H
#define KURA_PRELOAD_STREAM_H

#include <stdio.h>
#include <wchar.h>

struct cookie {
	int fd;
	int owns; /* fclose closes fd */
	FILE *f;
	struct cookie *next;
	int orient;        /* fwide orientation, kept here (see wstdio.c) */
	mbstate_t wst, rst; /* conversion states of wide output and input */
};

/* The registry's entry for f, or NULL when f is not a stream on a kura file. */
struct cookie *kp_stream_cookie(FILE *f);

#endif
