#include "util.h"
const char *greeting(void) { return "hello from a program built on the tree"; }
