/*
 * reap.h — giving back what killed processes held open.
 *
 * A dead family's counts (lock.h, "Owners") come out of the lock table, and
 * what only they kept — unlinked files, blocks cut off a mapped file — is
 * freed, as their last close would have.  Its atomic groups' shadows are
 * not counted there and stay orphans until a mount finds itself alone.
 */
#ifndef KURA_REAP_H
#define KURA_REAP_H

#include "fs.h"

/* Reaps every owner found dead; quietly does nothing on a mount that may
 * not change the pool (read-only, or after an I/O error). */
void reap_dead_owners(struct kura_fs *fs);

#endif
