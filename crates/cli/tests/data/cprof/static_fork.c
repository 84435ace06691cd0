/* A static program that forks (tests/cprof_static.rs): work() runs 300
 * times before the fork, 500 times in the child, 200 times in the parent
 * after it: 1000 in all; then a vfork child execs /bin/true (another
 * program, let go). */
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile long sink;

__attribute__((noinline)) void work(long i) { sink += i; }

int main(void) {
    for (long i = 0; i < 300; i++)
        work(i);
    pid_t p = fork();
    if (p == 0) {
        for (long i = 0; i < 500; i++)
            work(i);
        _exit(0);
    }
    waitpid(p, NULL, 0);
    for (long i = 0; i < 200; i++)
        work(i);
    pid_t q = vfork();
    if (q == 0) {
        execl("/bin/true", "true", (char *)NULL);
        _exit(127);
    }
    waitpid(q, NULL, 0);
    printf("done\n");
    return 0;
}
