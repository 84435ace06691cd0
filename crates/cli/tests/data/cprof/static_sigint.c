/* Counts the SIGINTs it gets: prints "ready", waits for the first, then
 * looks for a second for up to a second (ending at once if one comes) and
 * prints "got N SIGINT". A ^C on its terminal must reach it once. */
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

static volatile sig_atomic_t n;

static void count(int sig)
{
	(void)sig;
	n++;
}

int main(void)
{
	signal(SIGINT, count);
	printf("ready\n");
	fflush(stdout);
	while (!n)
		pause();
	for (int i = 0; i < 10 && n < 2; i++)
		usleep(100000);
	printf("got %d SIGINT\n", (int)n);
	fflush(stdout);
	return 0;
}
