/* mprof_stacks.rs's fork test: the parent allocates 3 x 1000 bytes at
 * one stack (main;work;leaf_alloc), forks, and the child allocates
 * 5 x 700 at the very same stack (the same call in main): the child's
 * stacks are in a table of its own, so nothing the forking thread kept
 * of a stack (its memo, its last walk: slots of the parent's table) may
 * be taken for the child's. Summed over both processes: 6,500 bytes. */
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void *volatile sink;

__attribute__((noinline)) static void *leaf_alloc(size_t n)
{
    void *p = malloc(n);
    sink = p;
    return p;
}

__attribute__((noinline)) static void work(int times, size_t n)
{
    for (int i = 0; i < times; i++)
        free(leaf_alloc(n));
}

int main(void)
{
    for (int round = 0; round < 2; round++) {
        work(round ? 5 : 3, round ? 700 : 1000); /* one call site for both */
        if (round == 0) {
            pid_t pid = fork();
            if (pid < 0)
                return 1;
            if (pid > 0) {
                int status = 1;
                waitpid(pid, &status, 0);
                return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
            }
        }
    }
    exit(0);
}
