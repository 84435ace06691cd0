/* mprof -p's detach: a program driven by one-letter commands on stdin,
 * answering one line each on stdout.
 *   w  which object the malloc its GOT holds lives in (dladdr's file)
 *   a  allocate 3 blocks of 77,777 bytes at one line, kept
 *   f  fork a child that allocates and frees, wait for it: its status
 *   x  exec cat (which echoes the rest of stdin), after saying "exec"
 *   q  free what it kept and exit 0
 * It starts by printing "ready PID". */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void *kept[64];
static int nkept;
/* Through the GOT: the address malloc resolves to for this program. */
static void *(*volatile got_malloc)(size_t);

int main(void)
{
    setvbuf(stdout, 0, _IOLBF, 0);
    printf("ready %d\n", (int)getpid());
    int c;
    while ((c = getchar()) != EOF) {
        if (c == 'w') {
            got_malloc = malloc;
            Dl_info di;
            const char *f = dladdr((void *)got_malloc, &di) && di.dli_fname ? di.dli_fname : "?";
            const char *base = strrchr(f, '/');
            printf("malloc in %s\n", base ? base + 1 : f);
        } else if (c == 'a') {
            for (int i = 0; i < 3 && nkept < 64; i++)
                kept[nkept++] = malloc(77777); /* the allocating line */
            printf("allocated %d\n", nkept);
        } else if (c == 'f') {
            pid_t p = fork();
            if (p == 0) {
                void *x = malloc(1000);
                free(x);
                _exit(7);
            }
            int st = 0;
            waitpid(p, &st, 0);
            printf("forked %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        } else if (c == 'x') {
            printf("exec\n");
            execl("/bin/cat", "cat", (char *)0);
            return 2;
        } else if (c == 'q') {
            for (int i = 0; i < nkept; i++)
                free(kept[i]);
            return 0;
        }
    }
    return 1;
}
