/* The unwinder fuzz target's fixture: a static program without libc whose
 * whole stack lies in its own text, from _start (CFI: return address
 * undefined, the root) through entry, outer, middle to leaf. Built by
 * fuzz/README.md's recipe. */
__asm__(".globl _start\n"
        "_start:\n"
        ".cfi_startproc\n"
        ".cfi_undefined rip\n"
        "  xor %ebp, %ebp\n"
        "  mov %rsp, %rdi\n"
        "  and $-16, %rsp\n"
        "  call entry\n"
        "  mov %eax, %edi\n"
        "  mov $60, %eax\n"
        "  syscall\n"
        "  hlt\n"
        ".cfi_endproc\n");

volatile unsigned long sink;

__attribute__((noinline)) unsigned long leaf(unsigned long n) {
    unsigned long acc = 0;
    for (unsigned long i = 0; i < n; i++)
        acc = acc * 31 + i;
    sink = acc;
    return acc;
}

__attribute__((noinline, optimize("no-omit-frame-pointer"))) unsigned long middle(unsigned long n) {
    volatile char buf[64];
    for (int i = 0; i < 64; i++)
        buf[i] = (char)(n + i);
    return leaf(n + buf[7]) + 1;
}

__attribute__((noinline)) unsigned long outer(unsigned long n) {
    unsigned long big[32];
    for (int i = 0; i < 32; i++)
        big[i] = middle(n + i);
    unsigned long s = 0;
    for (int i = 0; i < 32; i++)
        s += big[i];
    return s;
}

__attribute__((noinline)) int entry(unsigned long *sp) {
    return (int)(outer(sp[0] + 1000) & 0x7f);
}
