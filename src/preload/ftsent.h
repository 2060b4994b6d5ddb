/*
 * ftsent.h — the entries of the layer's fts (ftsent.c), for its walk
 * (fts.c).
 */
#ifndef KP_FTSENT_H
#define KP_FTSENT_H

#include <fts.h>
#include <stddef.h>
#include <sys/stat.h>

#define ISSET(sp, o) ((sp)->fts_options & (o))
#define SET(sp, o) ((sp)->fts_options |= (o))
#define CLR(sp, o) ((sp)->fts_options &= ~(o))

static inline int isdot(const char *n)
{
	return n[0] == '.' && (!n[1] || (n[1] == '.' && !n[2]));
}

/* One FTSENT for name in a single allocation with its stat buffer, path
 * copied (NULL and errno on failure); freed with kfts_ent_free. */
FTSENT *kfts_ent_alloc(const char *name, size_t namelen, const char *path, size_t pathlen);
void kfts_ent_free(FTSENT *p);
void kfts_list_free(FTSENT *p);
/* Stats p (following a link when follow or FTS_LOGICAL) and says what it is:
 * the fts_info value. */
unsigned short kfts_stat(FTS *sp, FTSENT *p, int follow);
void kfts_follow_link(FTS *sp, FTSENT *p);
/* The n entries of head in fts_compar's order. */
FTSENT *kfts_sort(FTS *sp, FTSENT *head, int n);

#endif
