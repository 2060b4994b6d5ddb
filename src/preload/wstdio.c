/*
 * wstdio.c — wide-character I/O on stdio.c's streams on kura files.
 *
 * A fopencookie stream has no wide-character side in glibc (its wide
 * functions return WEOF, and fgetws crashes), so on our streams the wide
 * functions are done here: characters are converted with the locale's
 * multibyte encoding and go through the byte stream.  fwscanf is not
 * provided: it fails with EOPNOTSUPP.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#include "kp.h"
#include "stream.h"

#define KP_IO_ERR_SEEN 0x0020

static struct cookie *wide(FILE *f)
{
	struct cookie *c = kp_stream_cookie(f);
	if (c && c->orient == 0)
		c->orient = 1;
	return c;
}

KP_EXPORT int fwide(FILE *f, int mode)
{
	struct cookie *c = kp_stream_cookie(f);
	if (!c)
		return REAL(fwide)(f, mode);
	if (c->orient == 0 && mode)
		c->orient = mode > 0 ? 1 : -1;
	return c->orient;
}

static wint_t put_wc(struct cookie *c, wchar_t wc)
{
	if (c->orient < 0)
		return WEOF;
	char mb[MB_LEN_MAX];
	size_t n = wcrtomb(mb, wc, &c->wst);
	if (n == (size_t)-1) {
		memset(&c->wst, 0, sizeof c->wst);
		c->f->_flags |= KP_IO_ERR_SEEN;
		errno = EILSEQ;
		return WEOF;
	}
	return fwrite(mb, 1, n, c->f) == n ? (wint_t)wc : WEOF;
}

static wint_t get_wc(struct cookie *c)
{
	if (c->orient < 0)
		return WEOF;
	size_t got = 0;
	for (;;) {
		int ch = getc(c->f);
		if (ch == EOF) {
			if (got) { /* the file ends inside a character */
				memset(&c->rst, 0, sizeof c->rst);
				c->f->_flags |= KP_IO_ERR_SEEN;
				errno = EILSEQ;
			}
			return WEOF;
		}
		char b = (char)ch;
		wchar_t wc;
		size_t r = mbrtowc(&wc, &b, 1, &c->rst);
		got++;
		if (r == (size_t)-2)
			continue;
		if (r == (size_t)-1) {
			memset(&c->rst, 0, sizeof c->rst);
			c->f->_flags |= KP_IO_ERR_SEEN;
			errno = EILSEQ;
			return WEOF;
		}
		return (wint_t)wc;
	}
}

KP_EXPORT wint_t fputwc(wchar_t wc, FILE *f)
{
	struct cookie *c = wide(f);
	return c ? put_wc(c, wc) : REAL(fputwc)(wc, f);
}
KP_EXPORT wint_t putwc(wchar_t wc, FILE *f)
{
	struct cookie *c = wide(f);
	return c ? put_wc(c, wc) : REAL(putwc)(wc, f);
}
KP_EXPORT wint_t fputwc_unlocked(wchar_t wc, FILE *f)
{
	struct cookie *c = wide(f);
	return c ? put_wc(c, wc) : REAL(fputwc_unlocked)(wc, f);
}
KP_EXPORT wint_t putwc_unlocked(wchar_t wc, FILE *f)
{
	struct cookie *c = wide(f);
	return c ? put_wc(c, wc) : REAL(putwc_unlocked)(wc, f);
}
KP_EXPORT wint_t putwchar(wchar_t wc)
{
	struct cookie *c = wide(stdout);
	return c ? put_wc(c, wc) : REAL(putwchar)(wc);
}
KP_EXPORT wint_t putwchar_unlocked(wchar_t wc)
{
	struct cookie *c = wide(stdout);
	return c ? put_wc(c, wc) : REAL(putwchar_unlocked)(wc);
}

static int put_ws(struct cookie *c, const wchar_t *ws)
{
	for (; *ws; ws++)
		if (put_wc(c, *ws) == WEOF)
			return -1;
	return 1;
}
KP_EXPORT int fputws(const wchar_t *ws, FILE *f)
{
	struct cookie *c = wide(f);
	return c ? put_ws(c, ws) : REAL(fputws)(ws, f);
}
KP_EXPORT int fputws_unlocked(const wchar_t *ws, FILE *f)
{
	struct cookie *c = wide(f);
	return c ? put_ws(c, ws) : REAL(fputws_unlocked)(ws, f);
}

KP_EXPORT wint_t fgetwc(FILE *f)
{
	struct cookie *c = wide(f);
	return c ? get_wc(c) : REAL(fgetwc)(f);
}
KP_EXPORT wint_t getwc(FILE *f)
{
	struct cookie *c = wide(f);
	return c ? get_wc(c) : REAL(getwc)(f);
}
KP_EXPORT wint_t fgetwc_unlocked(FILE *f)
{
	struct cookie *c = wide(f);
	return c ? get_wc(c) : REAL(fgetwc_unlocked)(f);
}
KP_EXPORT wint_t getwc_unlocked(FILE *f)
{
	struct cookie *c = wide(f);
	return c ? get_wc(c) : REAL(getwc_unlocked)(f);
}
KP_EXPORT wint_t getwchar(void)
{
	struct cookie *c = wide(stdin);
	return c ? get_wc(c) : REAL(getwchar)();
}
KP_EXPORT wint_t getwchar_unlocked(void)
{
	struct cookie *c = wide(stdin);
	return c ? get_wc(c) : REAL(getwchar_unlocked)();
}

/* Pushes the character back as its bytes (glibc's ungetc keeps more than
 * one byte in its backup area). */
KP_EXPORT wint_t ungetwc(wint_t wc, FILE *f)
{
	struct cookie *c = wide(f);
	if (!c)
		return REAL(ungetwc)(wc, f);
	if (wc == WEOF || c->orient < 0)
		return WEOF;
	char mb[MB_LEN_MAX];
	mbstate_t st;
	memset(&st, 0, sizeof st);
	size_t n = wcrtomb(mb, (wchar_t)wc, &st);
	if (n == (size_t)-1)
		return WEOF;
	while (n)
		if (ungetc((unsigned char)mb[--n], f) == EOF)
			return WEOF;
	return wc;
}

static wchar_t *get_ws(struct cookie *c, wchar_t *ws, int n)
{
	if (n <= 0) {
		errno = EINVAL;
		return NULL;
	}
	int i = 0;
	while (i < n - 1) {
		wint_t wc = get_wc(c);
		if (wc == WEOF) {
			if (i == 0 || ferror(c->f))
				return NULL;
			break;
		}
		ws[i++] = (wchar_t)wc;
		if (wc == L'\n')
			break;
	}
	ws[i] = L'\0';
	return ws;
}
KP_EXPORT wchar_t *fgetws(wchar_t *ws, int n, FILE *f)
{
	struct cookie *c = wide(f);
	return c ? get_ws(c, ws, n) : REAL(fgetws)(ws, n, f);
}
KP_EXPORT wchar_t *fgetws_unlocked(wchar_t *ws, int n, FILE *f)
{
	struct cookie *c = wide(f);
	return c ? get_ws(c, ws, n) : REAL(fgetws_unlocked)(ws, n, f);
}
KP_EXPORT wchar_t *__fgetws_chk(wchar_t *ws, size_t size, int n, FILE *f)
{
	(void)size;
	struct cookie *c = wide(f);
	return c ? get_ws(c, ws, n) : REALT(wchar_t * (*)(wchar_t *, size_t, int, FILE *), "__fgetws_chk")(ws, size, n, f);
}

/* Formats into wide characters, then writes them converted. */
static int put_wprintf(struct cookie *c, const wchar_t *fmt, va_list ap)
{
	if (c->orient < 0)
		return -1;
	size_t cap = 256;
	for (;;) {
		wchar_t *buf = malloc(cap * sizeof *buf);
		if (!buf)
			return -1;
		va_list aq;
		va_copy(aq, ap);
		int n = vswprintf(buf, cap, fmt, aq);
		va_end(aq);
		if (n >= 0) {
			int r = n;
			for (int i = 0; i < n; i++)
				if (put_wc(c, buf[i]) == WEOF) {
					r = -1;
					break;
				}
			free(buf);
			return r;
		}
		free(buf);
		/* vswprintf fails alike for "too small" and bad formats. */
		if (cap >= ((size_t)1 << 26)) {
			errno = EOVERFLOW;
			return -1;
		}
		cap *= 4;
	}
}
KP_EXPORT int vfwprintf(FILE *f, const wchar_t *fmt, va_list ap)
{
	struct cookie *c = wide(f);
	return c ? put_wprintf(c, fmt, ap) : REAL(vfwprintf)(f, fmt, ap);
}
KP_EXPORT int fwprintf(FILE *f, const wchar_t *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = vfwprintf(f, fmt, ap);
	va_end(ap);
	return r;
}
KP_EXPORT int vwprintf(const wchar_t *fmt, va_list ap)
{
	return vfwprintf(stdout, fmt, ap);
}
KP_EXPORT int wprintf(const wchar_t *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = vfwprintf(stdout, fmt, ap);
	va_end(ap);
	return r;
}
KP_EXPORT int __vfwprintf_chk(FILE *f, int flag, const wchar_t *fmt, va_list ap)
{
	struct cookie *c = wide(f);
	if (!c)
		return REALT(int (*)(FILE *, int, const wchar_t *, va_list), "__vfwprintf_chk")(f, flag, fmt, ap);
	return put_wprintf(c, fmt, ap);
}
KP_EXPORT int __fwprintf_chk(FILE *f, int flag, const wchar_t *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = __vfwprintf_chk(f, flag, fmt, ap);
	va_end(ap);
	return r;
}
KP_EXPORT int __vwprintf_chk(int flag, const wchar_t *fmt, va_list ap)
{
	return __vfwprintf_chk(stdout, flag, fmt, ap);
}
KP_EXPORT int __wprintf_chk(int flag, const wchar_t *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = __vfwprintf_chk(stdout, flag, fmt, ap);
	va_end(ap);
	return r;
}

static int no_wscanf(void)
{
	return kp_unsupported("wide-character scanf on a kura stream", EOPNOTSUPP), EOF;
}
/* <wchar.h> renames the scanf family to the __isoc99_ entry points, which
 * are what programs built since C99 call; these definitions carry those
 * names. */
static int real_vfwscanf(FILE *f, const wchar_t *fmt, va_list ap)
{
	return REALT(int (*)(FILE *, const wchar_t *, va_list), "__isoc99_vfwscanf")(f, fmt, ap);
}
KP_EXPORT int vfwscanf(FILE *f, const wchar_t *fmt, va_list ap)
{
	return kp_stream_cookie(f) ? no_wscanf() : real_vfwscanf(f, fmt, ap);
}
KP_EXPORT int fwscanf(FILE *f, const wchar_t *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = vfwscanf(f, fmt, ap);
	va_end(ap);
	return r;
}
KP_EXPORT int vwscanf(const wchar_t *fmt, va_list ap)
{
	return vfwscanf(stdin, fmt, ap);
}
KP_EXPORT int wscanf(const wchar_t *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = vfwscanf(stdin, fmt, ap);
	va_end(ap);
	return r;
}
