/* Counts the SIGINTs it gets: prints "ready", then "got N SIGINT" as each
 * comes, and waits for more until it is killed (cprof kills CMD's group
 * with SIGKILL when the grace after its own SIGINT ends): a duplicate is
 * seen whenever it comes before the kill, and nothing has to end in time.
 * A ^C on its terminal must reach it once. */
#include <signal.h>
#include <stdio.h>

static volatile sig_atomic_t n;

static void count(int sig)
{
	(void)sig;
	n++;
}

int main(void)
{
	sigset_t block, wait;
	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	/* SIGINT blocked but in sigsuspend: none is missed between the test
	 * of n and the wait. */
	sigprocmask(SIG_BLOCK, &block, &wait);
	sigdelset(&wait, SIGINT);
	signal(SIGINT, count);
	printf("ready\n");
	fflush(stdout);
	for (int seen = 0;;) {
		while (n == seen)
			sigsuspend(&wait);
		seen = n;
		printf("got %d SIGINT\n", seen);
		fflush(stdout);
	}
}
