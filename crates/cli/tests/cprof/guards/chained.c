/* Fall-throughs in a chain: `test; js; je; mov`, each jump testing the
 * same flags, the `je` and the `mov` each shorter than a jump and entered
 * only by falling through the jump before it, the `mov` falling into a
 * label another jump also leads to. The `mov` ran 70 times; a count
 * derived from the `je`'s fall-throughs, which nothing counted while the
 * `je` ran in place, said 0 (cc1 has such chains). */
static volatile long sink;

struct item {
  short kind;
  char pad[14];
  int value;
};

int classify(struct item *);

__asm__(".text\n"
        ".globl classify\n"
        ".type classify,@function\n"
        "classify:\n"
        "  mov 0x10(%rdi),%esi\n"
        "  nop; nop; nop; nop; nop; nop\n"
        "  test %esi,%esi\n"
        "  js 3f\n"
        "  je 2f\n"
        "  mov %esi,%eax\n"
        "1:\n"
        "  movzwl (%rdi),%ecx\n"
        "  add %ecx,%eax\n"
        "  nop; nop; nop; nop; nop\n"
        "  ret\n"
        "2:\n"
        "  xor %eax,%eax\n"
        "  jmp 1b\n"
        "3:\n"
        "  mov $-1,%eax\n"
        "  nop; nop; nop; nop; nop\n"
        "  ret\n"
        ".size classify,.-classify\n");

int main(void) {
  struct item x = {1, {0}, 0};
  long total = 0;
  for (int i = 0; i < 100; i++) {
    x.value = i % 10 - 2; /* 20 negative, 10 zero, 70 positive */
    total += classify(&x);
  }
  sink = total;
  return 0;
}
