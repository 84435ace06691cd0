/* A signal handler that siglongjmps out: the interrupted frames and the
 * handler never return. */
#include <setjmp.h>
#include <signal.h>

static sigjmp_buf back;
static volatile int hits;

static void handler(int sig)
{
	(void)sig;
	hits++;
	siglongjmp(back, 1);
}

static void busy(int n)
{
	volatile int x = 0;
	for (int i = 0; i < n; i++)
		x += i;
	raise(SIGUSR1);
	x = -1; /* never runs */
}

int main(void)
{
	signal(SIGUSR1, handler);
	for (int round = 0; round < 4; round++) {
		if (sigsetjmp(back, 1) == 0)
			busy(10 + round);
	}
	return hits == 4 ? 0 : 1;
}
