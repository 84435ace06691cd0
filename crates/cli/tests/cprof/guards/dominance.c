// Blocks whose hit is read from the blocks they lead to (hit mode's
// dominance, plan/dom.rs), where control leaves without returning: a
// loop's guard and a function's entry that lead into loops left by
// longjmp; a block entered from two blocks that each go on to it alone,
// after calls, in a function whose calls longjmp (so neither runs) and
// one whose call exits, and a join also reached by a branch that alone
// runs; the same shapes run whole for comparison.
#include <setjmp.h>
#include <stdlib.h>

static volatile int sink;
static jmp_buf env;

__attribute__((noinline)) static void leave(int how)
{
	if (how == 1)
		longjmp(env, 1);
	if (how == 2)
		exit(0);
	sink++;
}

// The guard leads to the loop and to the way out, both entered again
// from the loop: neither is entered from the guard alone.
__attribute__((noinline)) static int guarded(int n, int how)
{
	int r = 0;
	if (n <= 0)
		goto out;
	do {
		r += n * sink;
		if (n == 2)
			leave(how);
		n--;
	} while (n > 0);
out:
	return r + 1;
}

// The join is entered from the block after each call, and from nothing
// else.
__attribute__((noinline)) static int joined(int a, int how)
{
	int r;
	if (a & 1) {
		leave(how);
		r = a + sink;
	} else {
		leave(how);
		r = a - sink;
	}
	r *= 3;
	return r + sink;
}

// The same, called only to be left: its join never runs.
__attribute__((noinline)) static int joined_left(int a, int how)
{
	int r;
	if (a & 1) {
		leave(how);
		r = a + sink;
	} else {
		leave(how);
		r = a - sink;
	}
	r *= 5;
	return r + sink;
}

// The join (3:) is entered from the blocks after the two calls, which
// go on to it alone, and also by the first branch, which alone ever runs
// (mode 3): it ran, though neither block after a call did. In asm, for
// the shape: a compiler puts a block of its own before such a label.
__attribute__((noinline, used)) int bump_sink(void)
{
	return sink;
}

int joined_skipped(int a, int mode);

__asm__(".text\n"
	".globl joined_skipped\n"
	".type joined_skipped,@function\n"
	"joined_skipped:\n"
	"  push %rbx\n"
	"  mov %edi,%ebx\n"
	"  mov %edi,%eax\n"
	"  cmp $3,%esi\n"
	"  je 3f\n"
	"  test $1,%bl\n"
	"  je 1f\n"
	"  call bump_sink\n"
	"  add %ebx,%eax\n"
	"  jmp 3f\n"
	"1:\n"
	"  call bump_sink\n"
	"  sub %ebx,%eax\n"
	"3:\n"
	"  imul $7,%eax,%eax\n"
	"  pop %rbx\n"
	"  ret\n"
	".size joined_skipped,.-joined_skipped\n");

// The entry falls into a loop left by longjmp on its first round.
__attribute__((noinline)) static int loop_left(int n, int how)
{
	int r = sink;
	for (int i = 0; i < n; i++) {
		r += i * sink;
		leave(how);
	}
	return r;
}

int main(void)
{
	for (int i = -1; i < 4; i++)
		sink += guarded(i, 0);
	for (int i = 0; i < 4; i++)
		sink += joined(i, 0);
	for (int i = 0; i < 4; i++)
		sink += joined_skipped(i, 3);
	if (!setjmp(env))
		sink += guarded(3, 1);
	if (!setjmp(env))
		sink += joined_left(1, 1);
	if (!setjmp(env))
		sink += joined_left(2, 1);
	if (!setjmp(env))
		sink += loop_left(3, 1);
	sink += joined_left(3, 2);
	return 1; // not reached: exit(0) above
}
