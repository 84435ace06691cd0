/* exit() from a callee: main's code after the call never runs, and the
 * callee's frame never returns. */
#include <stdlib.h>

static volatile int work;

static void finish(int n)
{
	for (int i = 0; i < n; i++)
		work += i;
	if (work > 10)
		exit(0);
	work = -1;
}

static void middle(int n)
{
	finish(n);
	work++; /* never runs */
}

int main(void)
{
	for (int i = 0; i < 3; i++)
		work += i;
	middle(7);
	return 1; /* never runs */
}
