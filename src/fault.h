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
	FAULT_FILE_RUN_START,   /* file back end: a flush merged into the dirty run above it
	                           keeps the run's start, so msync misses the page below */
	FAULT_COUNT
};

extern int kura_fault;

#endif
