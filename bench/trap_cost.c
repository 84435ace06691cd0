/* What one of hit mode's one-shot probes costs when it is hit, split in
 * two (bench/README.md, "Hit mode: landing pads and meetings"): 100,000
 * int3 bytes run one after another, each taken by a SIGTRAP handler that
 * puts a nop back and resumes there. Mode 0 writes the byte as the
 * runtime does, through /proc/self/mem (the page stays read-only and
 * executable); mode 1 stores it (the page is writable and executable:
 * what the runtime does not do). Usage: trap_cost 0|1; prints
 * microseconds per trap. Build: cc -O2 -o trap_cost bench/trap_cost.c */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

static int mem_fd, mode;

static void on_trap(int sig, siginfo_t *si, void *ucv)
{
    (void)sig;
    (void)si;
    ucontext_t *uc = ucv;
    unsigned long ip = uc->uc_mcontext.gregs[REG_RIP] - 1;
    unsigned char nop = 0x90;
    if (mode == 0) {
        if (pwrite(mem_fd, &nop, 1, (off_t)ip) != 1)
            _exit(2);
    } else {
        *(volatile unsigned char *)ip = nop;
    }
    uc->uc_mcontext.gregs[REG_RIP] = ip;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    mode = argc > 1 ? atoi(argv[1]) : 0;
    const int n = 100000;
    unsigned char *code = mmap(0, n + 1, PROT_READ | PROT_WRITE | PROT_EXEC,
                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (code == MAP_FAILED)
        return 1;
    memset(code, 0xcc, n);
    code[n] = 0xc3; /* ret */
    if (mode == 0 && mprotect(code, n + 1, PROT_READ | PROT_EXEC))
        return 1;
    mem_fd = open("/proc/self/mem", O_RDWR);
    if (mem_fd < 0)
        return 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_trap;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGTRAP, &sa, 0);
    double t = now();
    ((void (*)(void))code)();
    printf("mode %d (%s): %.2f us per trap\n", mode, mode ? "store" : "/proc/self/mem",
           (now() - t) / n * 1e6);
    return 0;
}
