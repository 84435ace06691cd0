/* fork: profil, then fork; the child burns in child_hot, the parent in
 * parent_hot; each dumps its own copy of the buffer. */
#include "common.h"
#include <sys/wait.h>

WORK_FN(parent_hot)
WORK_FN(child_hot)

int main(int argc, char **argv) {
    double ms = arg_or(argc, argv, 1, 400);
    size_t n = text_cells();
    unsigned short *buf = calloc(n, sizeof *buf);
    size_t offset = (size_t)__executable_start;
    print_sym("main", (void *)main);
    print_sym("parent_hot", (void *)parent_hot);
    print_sym("child_hot", (void *)child_hot);
    fflush(stdout);
    if (profil(buf, n * 2, offset, 0xFFFF) != 0) {
        perror("profil");
        return 1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        burn(child_hot, ms);
        profil(NULL, 0, 0, 0);
        dump("child", buf, n * 2, offset, 0xFFFF);
        _exit(0);
    }
    burn(parent_hot, ms);
    int status;
    waitpid(pid, &status, 0);
    profil(NULL, 0, 0, 0);
    dump("parent", buf, n * 2, offset, 0xFFFF);
    printf("child_status %d\n", status);
    return 0;
}
