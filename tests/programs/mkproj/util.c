#include "util.h"
int triangle(int n) { return n * (n + 1) / 2; }
