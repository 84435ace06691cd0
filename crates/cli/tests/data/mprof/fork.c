/* mprof's fork test (see mprof_e2e.rs): the child starts from zero. */
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void)
{
    char *kept = malloc(1000); /* line 8: the parent's, kept */
    char *freed = malloc(3000); /* line 9: freed by the child only */
    pid_t pid = fork();
    if (pid == 0) {
        free(freed);
        free(kept);
        char *c = malloc(300); /* line 14: the child's, kept */
        c[0] = 1;
        exit(0);
    }
    waitpid(pid, 0, 0);
    char *p = malloc(200); /* line 19: the parent's, after the fork */
    p[0] = kept[0] = 1;
    return 0;
}
