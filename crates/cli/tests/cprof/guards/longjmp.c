/* longjmp out of recursion: each descent leaves 12 frames without
 * returning, so no callee's return is counted for them. */
#include <setjmp.h>

static jmp_buf back;
static volatile int depth_seen;

static void dive(int depth)
{
	depth_seen = depth;
	if (depth == 12)
		longjmp(back, depth);
	dive(depth + 1);
	depth_seen--; /* never runs */
}

int main(void)
{
	volatile int rounds = 0;
	if (setjmp(back) != 0)
		rounds++;
	if (rounds < 5)
		dive(0);
	return rounds == 5 ? 0 : 1;
}
