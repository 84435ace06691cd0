/* Every x86 condition code under the uprobe fallback
 * (tests/cprof_static.rs): j_CC(a, b) runs `cmp b, a; jCC` in inline
 * assembly, one function per line, over every pair of a set of values
 * that sets each flag both ways (overflow, sign, zero, carry, parity);
 * the jumps are the 6-byte form (0f 8x), the compiler's are mostly 2-byte.
 * The program counts, per condition, how often the CPU took the jump,
 * and prints "CC TAKEN NOT_TAKEN" lines: the oracle the lcov branch
 * records must match. */
#include <limits.h>
#include <stdio.h>

#define J(cc)                                                              \
    __attribute__((noinline)) int j_##cc(long a, long b) {                 \
        int fell = 0;                                                      \
        __asm__ volatile("cmp %2, %1\n\t%{disp32%} j" #cc " 1f\n\tmovl $1, %0\n1:" \
                         : "+r"(fell)                                      \
                         : "r"(a), "r"(b)                                  \
                         : "cc");                                          \
        return fell;                                                       \
    }
J(o)
J(no)
J(b)
J(ae)
J(e)
J(ne)
J(be)
J(a)
J(s)
J(ns)
J(p)
J(np)
J(l)
J(ge)
J(le)
J(g)

static const long values[] = {0,    1,         2,        3,        -1,  -2, 0x7f,
                              0x80, LONG_MAX,  LONG_MIN, LONG_MIN + 1, 12345, -77};

int main(void) {
    static int (*const f[16])(long, long) = {j_o, j_no, j_b, j_ae, j_e, j_ne, j_be, j_a,
                                             j_s, j_ns, j_p, j_np, j_l, j_ge, j_le, j_g};
    static const char *const name[16] = {"o", "no", "b", "ae", "e", "ne", "be", "a",
                                         "s", "ns", "p", "np", "l", "ge", "le", "g"};
    int n = sizeof values / sizeof values[0];
    for (int c = 0; c < 16; c++) {
        long fell = 0, all = 0;
        for (int i = 0; i < n; i++)
            for (int k = 0; k < n; k++) {
                fell += f[c](values[i], values[k]);
                all++;
            }
        printf("%s %ld %ld\n", name[c], all - fell, fell);
    }
    return 0;
}
