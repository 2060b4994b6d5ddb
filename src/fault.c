/* fault.c — the run-time switch of fault.h; only the crash tests set it. */
#include "fault.h"

int kura_fault = FAULT_NONE;
