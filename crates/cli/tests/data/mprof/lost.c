/* 54321 bytes at line 12, then an end that runs no destructor: argv[1] is
 * "_exit" (_exit(0)), "segv" (a null write: SIGSEGV), "kill" (SIGKILL, as
 * the OOM killer sends), or "wait" ("ready PID" on stdout, then wait for
 * a signal). mprof_e2e.rs: the bytes must be shown all the same. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void use(char *p) { memset(p, 1, 54321); }
int main(int argc, char **argv) { char *p = malloc(54321); /* line 12 */
    use(p);
    const char *how = argc > 1 ? argv[1] : "";
    if (!strcmp(how, "_exit"))
        _exit(0);
    if (!strcmp(how, "segv"))
        *(volatile int *)0 = 1;
    if (!strcmp(how, "kill"))
        raise(SIGKILL);
    if (!strcmp(how, "wait")) {
        printf("ready %d\n", (int)getpid());
        fflush(stdout);
        for (;;)
            pause();
    }
    return 0;
}
