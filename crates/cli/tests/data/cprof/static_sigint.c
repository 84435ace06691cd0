/* Counts the SIGINTs it gets: prints "ready PID", then "got N SIGINT" as
 * each comes, and waits for more until it is ended (the test sends it
 * SIGTERM once it has shown the first): a duplicate is seen whenever it
 * comes before that, and nothing has to end in time. A ^C on its
 * terminal must reach it once. */
#include <unistd.h>
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
	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	for (int seen = 0;;) {
		while (n == seen)
			sigsuspend(&wait);
		seen = n;
		printf("got %d SIGINT\n", seen);
		fflush(stdout);
	}
}
