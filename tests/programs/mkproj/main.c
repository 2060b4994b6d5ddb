#include <stdio.h>
#include "util.h"
int main(void)
{
	FILE *f = fopen("result.txt", "w");
	fprintf(f, "%s: %d\n", greeting(), triangle(100));
	fclose(f);
	printf("%s: %d\n", greeting(), triangle(100));
	return 0;
}
