/*
 * fault.h — deliberate bugs, switched on at run time by the crash tests.
 *
 * The crash explorer (tests/crash_*) is only trustworthy if it can fail.
 * Each value names one crash-consistency bug that a hook in the engine
 * introduces while kura_fault holds it; the fault tests set the switch, run
 * workloads, and pass only when the explorer reports a violation.  The switch
 * is 0 (no fault) in every normal run; each hook costs one predictable branch.
 */
#ifndef KURA_FAULT_H
#define KURA_FAULT_H

enum kura_fault_kind {
	FAULT_NONE = 0,
	FAULT_DROP_FLUSH,       /* tx_commit does not flush the first dirty line */
	FAULT_DIR_IN_PLACE,     /* dir_add writes the new entry without the undo log */
	FAULT_SIZE_BEFORE_DATA, /* inode_write makes a grown size durable before the data */
	FAULT_DROP_SYNC,        /* file back end: a journal sync (fdatasync) is skipped */
	FAULT_RECORD_CRC_HEAD,  /* journal: a record's crc covers its header only, so a record
	                           whose payload did not reach the disk still replays */
	FAULT_CHECKPOINT_EARLY, /* journal: a checkpoint retires the records (new head) before
	                           the home writes it made are durable */
	FAULT_MAP_UNRECORDED,   /* kura_map_sync only marks a map's blocks for the checkpoint:
	                           msync returns with the stores in no journal record */
	FAULT_SEAL_HOME_EARLY,  /* journal, fsync mode: a seal's record links blocks it wrote
	                           home before they are durable */
	FAULT_MAP_HOME_UNRECORDED, /* journal: a checkpoint writes a page a map showed home as the
	                           copy shows it, stores no record carries included */
	FAULT_GROUP_SPLIT_COMMIT, /* an atomic group's commit moves its first block in a transaction
	                           of its own */
	FAULT_MIXED_UNSEALED,   /* journal: an op-mode commit stages its record while changes an
	                           fsync-mode process left pending wait unsealed before it */
	FAULT_UNWRITTEN_EARLY,  /* the first write into an unwritten block clears the block's bit
	                           durably before its data are in */
	FAULT_BEHIND_STALE,     /* journal, fsync mode: a block written behind keeps its mark when
	                           a commit changes it, so the seal leaves its home as it was */
	FAULT_COUNT
};

extern int kura_fault;

#endif
